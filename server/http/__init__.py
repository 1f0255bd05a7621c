"""HTTP: the FastAPI app, routes, request models and OpenAI-shaped errors."""
