"""relay: batch document processing with signed, retrying batch-completion webhooks."""

__version__ = "0.1.0"
