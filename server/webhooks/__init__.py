"""Webhooks for background responses: each ending posted, signed as Standard Webhooks (OpenAI's way), at least once."""
