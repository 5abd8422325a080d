"""The Spark plumbing: routing and packing events into state keys, the transformWithState
adapter, its state layout, the engine hosts, the session and the query."""
