"""asv suite of pytest-ipcbench (see asv.conf.json and docs/performance-history.md)."""
