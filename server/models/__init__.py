"""The served models: each one's settings, the fleet file that declares them, and the registry requests ask."""
