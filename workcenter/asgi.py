"""ASGI entry point: `daphne workcenter.asgi:application` serves pages, API, static files and websockets.

Importing this module is what starting a server means (daphne, `manage.py runserver`, any ASGI
server): with debug off it refuses unsafe settings first (workcenter/security.py).
"""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "workcenter.settings")

from workcenter.security import refuse_insecure_production  # noqa: E402

refuse_insecure_production()

from workcenter.serving import redact_access_log, trim_server_overheads  # noqa: E402

trim_server_overheads()  # the standard reason phrases among them: "422 Unprocessable Content", not "Unknown Status"
redact_access_log()  # no credential of a query string in daphne's access log

from workcenter.handlers import get_asgi_application  # noqa: E402 (one thread hop per request, kept DB connections)

django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

from dashboard.routing import websocket_application  # noqa: E402
from workcenter.staticfiles import StaticFilesApp  # noqa: E402

# Static files (the docs' Swagger UI, the dashboard's scripts, the admin's) are served by the app
# itself, debug on or off, so a single daphne process works offline without a separate web
# server (workcenter/staticfiles.py). Websockets: the live stream of API.md §4 (origin and
# credential checks in dashboard/routing.py).
from workcenter.dispatch.longpoll import LongPollClaims  # noqa: E402
# on the embedded default, other processes' commits (and the wakes of parked claims) come in
# through the live stream's event pump: a waiting claim keeps it running
from dashboard.stream.pump import pump  # noqa: E402
# `/healthz` is answered first, on the event loop, from the process's cached check: a flood of it
# takes no request thread and opens no connection (workcenter/health.py).
from workcenter.health import HealthCheck  # noqa: E402

application = ProtocolTypeRouter({
    "http": HealthCheck(LongPollClaims(StaticFilesApp(django_asgi_app), watch=pump)),
    "websocket": websocket_application,
})

# Last: everything the server needs is loaded; the collector skips it from here on (serving.py).
from workcenter.serving import freeze_startup_heap  # noqa: E402

freeze_startup_heap()
