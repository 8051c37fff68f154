"""ASGI entry point: `daphne workcenter.asgi:application` serves pages, API, static files and websockets."""
import os

from workcenter.handlers import get_asgi_application  # one thread hop per request, kept DB connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "workcenter.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from dashboard.routing import websocket_application  # noqa: E402

# Static files (the docs' Swagger UI, the dashboard's scripts) are served by the app itself,
# so a single daphne process works offline without a separate web server. Websockets: the live
# stream of API.md §4 (origin and credential checks in dashboard/routing.py).
application = ProtocolTypeRouter({
    "http": ASGIStaticFilesHandler(django_asgi_app),
    "websocket": websocket_application,
})
