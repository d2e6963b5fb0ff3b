"""The REST service: routes, wire formats, authentication, metrics, OpenAPI."""
