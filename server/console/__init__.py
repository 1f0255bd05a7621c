"""The console (pages for a browser at /console), the docs site and the API reference, served offline."""
