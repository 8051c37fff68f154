from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"

    def ready(self) -> None:
        # every process that commits (web server, workers, commands) pushes its events to the
        # channel layer; with Redis they reach the websocket clients of every web process.
        # Imported here, not at the top: the publisher imports the models, which need the app
        # registry that is being populated while this module is imported.
        from .stream.publisher import publisher

        publisher.register()
