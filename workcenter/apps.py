from django.apps import AppConfig


class WorkcenterConfig(AppConfig):
    name = "workcenter"
    verbose_name = "Work Center"
    default_auto_field = "django.db.models.BigAutoField"
