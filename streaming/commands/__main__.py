import sys

from streaming.commands import main

sys.exit(main())
