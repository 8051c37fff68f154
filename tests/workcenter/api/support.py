"""Assertions shared by the API tests."""


def error_of(response, status: int, code: str) -> dict:
    """The API.md §0 error body of `response`, after checking its status, shape and code."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"code", "message", "extra"}
    assert body["code"] == code
    return body
