"""Three transports of a consumer project, plugged into pytest-ipcbench by entry point."""
