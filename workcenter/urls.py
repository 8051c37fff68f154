from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from .api import api, api_not_found

urlpatterns = [
    # The dashboard arrives with its own issue; until then the front page is the API's docs.
    path("", RedirectView.as_view(url="/api/v1/docs", permanent=False), name="home"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", api.urls),
    re_path(r"^api/v1/(?P<rest>.*)$", api_not_found),
]
