from django.urls import path

from . import views

app_name = "dashboard"

urlpatterns = [
    path("", views.work_item_list_page, name="list"),
    path("work-items/<str:item_id>/", views.work_item_page, name="item"),
    path("workers/", views.workers_page, name="workers"),
    path("inbox/", views.inbox_page, name="inbox"),
    path("logs/", views.logs_page, name="logs"),
]
