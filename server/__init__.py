"""The HTTP side of responses-server: app, routes, requests, errors, configuration, engine adapters."""
