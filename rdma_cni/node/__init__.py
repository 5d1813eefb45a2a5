"""Node facts: NIC discovery, host facts, GIDs, allocation, address pools."""
