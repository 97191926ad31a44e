"""The operator console at ``/console``: server-rendered pages over the same domain queries
as the API (``relay.console.queries``), behind operator keys and signed session cookies
(``relay.console.session``)."""
