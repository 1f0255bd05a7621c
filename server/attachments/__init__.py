"""What a request's input carries beyond text: images (decoded, fetched), files (read as text), data URLs."""
