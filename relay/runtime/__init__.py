"""The long-running processes other than the API: the RQ worker and its context,
document processing in the extraction sandbox, the detector and its sweepers."""
