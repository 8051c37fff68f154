"""The live stream (API.md §4): committed events, progress and overviews, from the store's
after-commit hooks to the websocket clients."""
