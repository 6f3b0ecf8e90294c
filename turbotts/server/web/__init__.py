"""The HTTP layer: the FastAPI app, its dependencies, routes, schemas, uploads, error mapping and static files."""
