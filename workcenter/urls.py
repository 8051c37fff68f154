from django.contrib import admin
from django.urls import include, path, re_path

from .api import api, api_not_found

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", api.urls),
    re_path(r"^api/v1/(?P<rest>.*)$", api_not_found),
]
