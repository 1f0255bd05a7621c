"""Stored responses and conversations: their records, their SQL and their migrations, and one project's view of them."""
