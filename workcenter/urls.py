from django.contrib import admin
from django.urls import include, path, re_path

from dashboard import views as dashboard_views

from . import metrics
from .api import api, api_not_found

urlpatterns = [
    path("", include("dashboard.urls")),
    path("admin/", admin.site.urls),
    path("accounts/demo-login/<str:uidb64>/<str:token>/", dashboard_views.demo_login, name="demo-login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", api.urls),
    path("metrics", metrics.metrics, name="metrics"),
    path("healthz", metrics.healthz, name="healthz"),
    re_path(r"^api/v1/(?P<rest>.*)$", api_not_found),
]
