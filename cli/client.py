"""A small HTTP client for the Traincast API that turns failures into one-line errors."""

from typing import Any

import httpx


class CliError(Exception):
    """An error the CLI prints as one line and exits 1 on."""


class Api:
    """Calls to one Traincast API."""

    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)

    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """Send a request; raise CliError with the problem's detail on any failure."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise CliError(
                f"cannot reach the Traincast API at {self.base_url} ({exc.__class__.__name__}); "
                "start it with `make up` or set TRAINCAST_API_URL / --api-url"
            ) from exc
        if response.status_code >= 400:
            try:
                body = response.json()
                message = f"{body.get('title', response.reason_phrase)}: {body.get('detail', '')}"
            except ValueError:
                message = f"{response.status_code} {response.reason_phrase}"
            raise CliError(message)
        data: dict[str, Any] = response.json()
        return data
