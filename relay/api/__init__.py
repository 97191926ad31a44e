"""The HTTP API v1 (Starlette). ``create_app(settings)`` builds it."""
