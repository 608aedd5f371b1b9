"""The cluster controller: leader elections, broker failures, controlled shutdown, reassignment."""
