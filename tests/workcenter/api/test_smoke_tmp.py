import json, pytest
from django.contrib.auth.models import User, Permission
from django.test import Client
from workcenter.auth import api_token_create

@pytest.mark.django_db
def test_smoke(tmp_path):
    u = User.objects.create_superuser("alice", password="pw")
    _, tok = api_token_create(user=u, name="t")
    c = Client(HTTP_AUTHORIZATION=f"Bearer {tok}")
    r = c.post("/api/v1/work-items", {"title": "T", "goal": "G", "work_item_type": "software-change", "work_dir": str(tmp_path)}, content_type="application/json")
    iid = r.json()["id"]
    r = c.post(f"/api/v1/work-items/{iid}/retry", content_type="application/json"); print(r.status_code, r.json())
    r = c.post(f"/api/v1/work-items/{iid}/retry", "[]", content_type="application/json"); print(r.status_code, r.json())
    r = c.post(f"/api/v1/work-items/{iid}/retry", "null", content_type="application/json"); print(r.status_code, r.json())
    r = c.post(f"/api/v1/work-items/{iid}/start"); print(r.status_code, r.json()["status"])
    r = c.post(f"/api/v1/work-items", "[]", content_type="application/json"); print(r.status_code, r.json())
    r = c.post(f"/api/v1/work-items", "", content_type="application/json"); print(r.status_code, r.json())
    r = c.get(f"/api/v1/work-items/{iid}/retry-preview"); print(r.status_code, r.json())
    r = c.get(f"/api/v1/events?after_id=abc"); print(r.status_code, r.json())
    r = c.get(f"/api/v1/work-items?status=bogus"); print(r.status_code, r.json())
