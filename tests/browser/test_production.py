"""Production mode in a real browser: daphne with debug off and the documented production
environment (behind a TLS-terminating proxy), its static files from collectstatic, every page
under the Content-Security-Policy without a violation, and the live stream up."""
from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from django.contrib.auth.models import User

from tests.conftest import Clock, Store, make_graph
from tests.production import manage, production_env

from .conftest import PASSWORD
from .live import LiveServer

pytestmark = pytest.mark.django_db(transaction=True)

STAGES = [
    {"id": "survey", "type": "research", "mode": "read"},
    {"id": "build", "deps": ["survey"], "type": "implement", "mode": "isolated-write"},
    {"id": "check", "deps": ["build"], "type": "review"},
]

# Every CSP violation of a page, caught before its own scripts run (Playwright's init scripts
# are not subject to the page's policy).
WATCH_CSP = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ${e.sourceFile}:${e.lineNumber}`);
});
"""


@pytest.fixture(scope="module")
def production_server(django_db_setup, django_db_blocker, tmp_path_factory):
    """The TLS-terminating proxy is played by the browser itself: every request carries
    `X-Forwarded-Proto: https`, as the proxy would add (so no SSL redirect), while the page's own
    origin stays http://127.0.0.1:PORT, which the CSRF check is told to trust."""
    static_root = tmp_path_factory.mktemp("static")
    env = production_env(DJANGO_ALLOWED_HOSTS="127.0.0.1", DJANGO_STATIC_ROOT=str(static_root))
    collect = manage("collectstatic", "--noinput", env=env)
    assert collect.returncode == 0, collect.stderr
    server = LiveServer(tmp_path_factory.mktemp("daphne") / "daphne.log", env)
    server.env["DJANGO_CSRF_TRUSTED_ORIGINS"] = server.url
    server.start()
    yield server
    server.stop()


@pytest.fixture
def watched(browser, production_server):
    """A browser context as behind the proxy, and the problems its pages met: CSP violations
    (read per page with `violations(page)`), script errors, failed or refused requests."""
    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  extra_http_headers={"X-Forwarded-Proto": "https"})
    context.add_init_script(WATCH_CSP)
    problems: list[str] = []
    context.on("weberror", lambda e: problems.append(f"script error: {e.error}"))
    # net::ERR_ABORTED: a read the page itself dropped when the test went to the next page (on a
    # loaded machine the list's first read can still be on its way then)
    context.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} {r.failure}")
               if "ERR_ABORTED" not in (r.failure or "") else None)
    context.on("response", lambda r: problems.append(f"{r.status} for {r.url}") if r.status >= 400 else None)
    context.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    yield context, problems
    context.close()
    assert not problems, problems


def violations(page) -> list[str]:
    return page.evaluate("window.__cspViolations")


def visit(page, url: str, ready: str) -> None:
    response = page.goto(url)
    assert response.status == 200, (url, response.status)
    headers = response.headers
    assert "script-src 'self'" in headers["content-security-policy"], url
    assert headers["strict-transport-security"].startswith("max-age="), url
    page.wait_for_selector(ready)
    assert violations(page) == [], url


def styled(page) -> bool:
    """dashboard.css (a collected, compressed static file) is applied."""
    return page.evaluate("getComputedStyle(document.querySelector('.topbar')).display") == "flex"


def sign_in(page, url: str, username: str) -> None:
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("[type=submit]")
    page.wait_for_url(url)


def login_page(production_server, watched, path: str = "/accounts/login/"):
    """A new page of the watched context at the login form `path` (loaded under the policy),
    and the server's base URL."""
    context, _ = watched
    page = context.new_page()
    page.set_default_timeout(15_000)
    visit(page, f"{production_server.url}{path}", "#id_username")
    return page, production_server.url


def test_pages_and_static_files_load_under_the_policy_and_the_stream_goes_live(production_server, watched, lead, bg):
    item = bg(make_graph, Store(Clock()), STAGES, title="Production page")
    page, base = login_page(production_server, watched)
    assert styled(page)
    sign_in(page, f"{base}/", "lead")
    page.wait_for_selector(f'#items tr[data-id="{item.pk}"]')
    page.wait_for_selector('#conn[data-state="live"]')
    assert violations(page) == []
    assert styled(page)
    # the progress bar's widths are set through the CSSOM, which the policy allows
    assert page.locator(".progress-seg").count() > 0

    visit(page, f"{base}/work-items/{item.pk}/", "#graph g.node")
    page.wait_for_selector('#conn[data-state="live"]')
    assert violations(page) == []

    cookies = {c["name"]: c for c in page.context.cookies()}
    assert cookies["sessionid"]["secure"] and cookies["sessionid"]["httpOnly"]
    assert cookies["csrftoken"]["secure"]


# the names on `window` that a page's own scripts could have added for tests
GLOBALS = "() => Object.getOwnPropertyNames(window).sort()"


def test_the_dashboard_pages_put_nothing_for_tests_on_window(production_server, watched, lead, bg):
    """The browser tests read the DOM, the pages' performance entries and their websocket traffic:
    in production no page exposes a hook (`window.__wc…`) nor any other name of its own."""
    item = bg(make_graph, Store(Clock()), STAGES, title="Nothing on window")
    page, base = login_page(production_server, watched)
    plain = set(page.evaluate(GLOBALS))  # a page without the dashboard's scripts (the login form)
    sign_in(page, f"{base}/", "lead")
    page.wait_for_selector("#overview .ov-stat")  # the list's own reads done (leaving would abort them)
    for path, ready in [("/", f'#items tr[data-id="{item.pk}"]'), (f"/work-items/{item.pk}/", "#graph g.node"),
                        ("/workers/", "#workers-summary")]:
        visit(page, f"{base}{path}", ready)
        page.wait_for_selector('#conn[data-state="live"]')
        if path == "/":
            page.wait_for_selector("#overview .ov-stat")  # its own read done (leaving would abort it)
        page.wait_for_timeout(300)  # the first frames drawn, the timers of the page running
        names = page.evaluate(GLOBALS)
        assert [n for n in names if n.startswith("__wc")] == [], path
        assert sorted(set(names) - plain) == [], path


def test_django_admin_and_the_api_docs_work_under_the_policy(production_server, watched, transactional_db, bg):
    User.objects.create_superuser("root", password=PASSWORD)
    item = bg(make_graph, Store(Clock()), STAGES, title="Admin page")
    action = item.actions.order_by("sequence").first()
    page, base = login_page(production_server, watched, "/admin/login/")
    assert page.evaluate("getComputedStyle(document.querySelector('#header')).display") != "inline"  # admin CSS
    sign_in(page, f"{base}/admin/", "root")
    assert violations(page) == []
    # a change page with the repair buttons (styled from admin.css, not inline) and admin scripts
    visit(page, f"{base}/admin/workcenter/action/{action.pk}/change/", "button.wc-repair-tool")
    assert page.evaluate("getComputedStyle(document.querySelector('button.wc-repair-tool')).borderRadius") == "15px"
    visit(page, f"{base}/admin/workcenter/action/", "#result_list")
    page.check("#action-toggle")  # actions.js, an admin script, runs
    assert page.locator("tr.selected").count() >= 1
    assert violations(page) == []

    visit(page, f"{base}/api/v1/docs", ".swagger-ui .info .title")
    page.wait_for_selector(".swagger-ui .opblock")  # the schema was fetched and rendered
    assert violations(page) == []


def test_plain_http_is_redirected_to_https(production_server):
    request = urllib.request.Request(f"{production_server.url}/accounts/login/")

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.build_opener(NoRedirect).open(request, timeout=10)
    assert caught.value.code == 301
    assert caught.value.headers["Location"] == f"https://127.0.0.1:{production_server.port}/accounts/login/"
