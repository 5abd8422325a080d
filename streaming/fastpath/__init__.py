"""Column passes that skip work the rules would do event by event, proven equal to the plain path."""
