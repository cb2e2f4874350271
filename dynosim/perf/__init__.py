"""Performance models: how long one engine iteration takes, and how much KV memory a GPU has."""
