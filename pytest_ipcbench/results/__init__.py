"""The results data model: a run's records, their file and its checks, statistics of samples."""
