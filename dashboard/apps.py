from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"

    def ready(self) -> None:
        # every process that commits (web server, workers, commands) pushes its events to the
        # channel layer; with Redis they reach the websocket clients of every web process
        from workcenter import events

        events.set_publisher(events.channel_publish)
        events.set_progress_publisher(events.channel_progress_publish)
