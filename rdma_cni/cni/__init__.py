"""The CNI protocol: dispatch, request, versions, results, command handlers."""
