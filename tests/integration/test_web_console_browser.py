"""The web console in a real browser: Debian's headless Chromium, driven by selenium, loads
the page of a broker run with ACL and checks what renders: the login form, a topic's row,
a group's lag figure and its lag per queue, look-up results (text and markup shown as
text, binary as hex, nothing of a message run as script), the admin actions for a super
user, and none of them for a user without rights, who sees only its own topic. No error
is logged in the browser's console (a script blocked by the page's CSP would be).

Skipped with the reason where Chromium, chromedriver or selenium is missing (CI installs
them). With ``CONSOLE_SCREENSHOT_DIR`` set, screenshots of what it saw are saved there.
"""

from __future__ import annotations

import pytest

from tests.support import browser
from tests.support.console_broker import (
    MARKUP_BODY,
    SECRETS,
    http_base,
    screenshot_dir,
    seed,
    start_console_broker,
)

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing())),
]

WAIT_S = 15


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    broker = start_console_broker(tmp_path_factory.mktemp("browser-console"), acl=True)
    seeded = seed(broker, user="root")
    yield http_base(broker), seeded
    broker.clean_up()


@pytest.fixture
def chromium(tmp_path):
    driver = browser.start_chromium(tmp_path / "profile")
    yield driver
    driver.quit()


def wait_for(driver, css: str, *, visible: bool = True):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    condition = ec.visibility_of_element_located if visible else ec.presence_of_element_located
    return WebDriverWait(driver, WAIT_S).until(condition((By.CSS_SELECTOR, css)))


def wait_text(driver, css: str, text: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, WAIT_S).until(
        ec.text_to_be_present_in_element((By.CSS_SELECTOR, css), text)
    )


def sign_in(driver, base: str, user: str) -> None:
    driver.get(base + "/")
    wait_for(driver, "#login-form")
    driver.find_element("id", "access-key").send_keys(user)
    driver.find_element("id", "secret-key").send_keys(SECRETS[user])
    driver.find_element("css selector", "#login-form button[type=submit]").click()
    wait_for(driver, 'tr[data-topic="orders"]')


def look_up(driver, by: str, **fields: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", "lookup-by")).select_by_value(by)
    for name, value in fields.items():
        box = driver.find_element("id", f"lookup-{name}")
        box.clear()
        box.send_keys(value)
    driver.find_element("css selector", "#lookup button[type=submit]").click()


def displayed_admin_actions(driver) -> list[str]:
    found = driver.find_elements("css selector", ".admin, form.reset, #create-topic")
    return [e.get_attribute("id") or e.get_attribute("class") for e in found if e.is_displayed()]


def save(driver, name: str) -> None:
    folder = screenshot_dir()
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(folder / name))


def browser_errors(driver) -> list[str]:
    # the one expected error: the first /api/session, answered 401 before signing in
    return [
        e["message"]
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and "status of 401" not in e["message"]
    ]


def test_a_super_user_sees_topics_lag_look_ups_and_admin_actions(console, chromium):
    base, seeded = console
    driver = chromium
    driver.get(base + "/")
    assert wait_for(driver, "#login").is_displayed()
    assert not driver.find_element("id", "console").is_displayed()
    sign_in(driver, base, "root")

    row = driver.find_element("css selector", 'tr[data-topic="orders"]')
    assert row.find_element("css selector", '[data-messages="orders"]').text == str(
        seeded.sent["orders"]
    )
    assert driver.find_elements("css selector", 'tr[data-topic="audit"]')
    row.click()  # its queues, fetched when opened
    cells = wait_for(driver, '[data-queue="orders/2"]').find_elements("css selector", "td")
    high = str(seeded.max_offsets[2])
    assert [c.text for c in cells] == ["2", "0", high, high]  # queue, min, max, messages
    wait_text(driver, '[data-lag="billing"]', f"{seeded.lag:,}")
    assert driver.find_element("id", "who").text == "root (admin)"
    wait_text(driver, "#ready", "ready")

    # a group's lag per queue, and the reset form of an admin
    driver.find_element("css selector", 'tr[data-group="billing"]').click()
    cells = wait_for(driver, '[data-lag-queue="billing/orders/2"]').find_elements(
        "css selector", "td"
    )
    lag = seeded.max_offsets[2] - seeded.committed[2]
    assert [c.text for c in cells[:5]] == [
        "orders",
        "2",
        str(seeded.committed[2]),
        str(seeded.max_offsets[2]),
        str(lag),
    ]
    assert driver.find_element("css selector", "form.reset").is_displayed()
    assert driver.find_element("id", "create-topic").is_displayed()

    # look-ups: by key, then markup and binary bodies shown as text and hex
    look_up(driver, "key", topic="orders", key="order-3")
    result = wait_for(driver, "#lookup-result .message")
    assert result.get_attribute("data-message") == seeded.ids["order-3"]
    assert '{"order": 3, "status": "paid"}' in result.find_element("css selector", "pre.body").text
    save(driver, "console-admin.png")

    look_up(driver, "key", topic="orders", key="markup")
    wait_text(driver, "#lookup-result pre.body", "naïve")
    assert (
        driver.find_element("css selector", "#lookup-result pre.body").text == MARKUP_BODY.decode()
    )
    assert not driver.find_elements("css selector", "#lookup-result img")
    look_up(driver, "key", topic="orders", key="binary")
    wait_text(driver, "#lookup-result pre.body", "00000000  00 01 fe ff")
    queue, offset = seeded.positions["binary"]
    look_up(driver, "offset", topic="orders", queue=str(queue), offset=str(offset))
    wait_text(driver, "#lookup-result pre.body", "00000000  00 01 fe ff")
    look_up(driver, "id", id=seeded.ids["order-5"])
    wait_text(driver, "#lookup-result", "order-5")
    assert driver.execute_script("return window.pwned === undefined")
    assert driver.execute_script("return document.scripts.length") == 1
    assert browser_errors(driver) == []

    # creating a topic asks first; cancelling creates nothing
    driver.find_element("id", "new-topic").send_keys("from-the-browser")
    driver.find_element("css selector", "#create-topic button").click()
    wait_text(driver, "#confirm-text", "Create topic from-the-browser")
    driver.find_element("id", "confirm-no").click()
    driver.find_element("css selector", "#create-topic button").click()
    wait_for(driver, "#confirm-yes").click()
    wait_for(driver, 'tr[data-topic="from-the-browser"]')


def test_a_user_without_rights_sees_its_topic_and_no_admin_actions(console, chromium):
    base, seeded = console
    driver = chromium
    driver.get(base + "/")
    wait_for(driver, "#login-form")
    driver.find_element("id", "access-key").send_keys("alice")
    driver.find_element("id", "secret-key").send_keys("not-her-secret")
    driver.find_element("css selector", "#login-form button[type=submit]").click()
    wait_text(driver, "#login-error", "invalid access key or secret key")
    assert not driver.find_element("id", "console").is_displayed()
    assert driver.execute_script("return sessionStorage.length") == 0
    sign_in(driver, base, "alice")
    wait_text(driver, '[data-lag="billing"]', f"{seeded.lag:,}")
    assert driver.find_element("id", "who").text == "alice"
    assert not driver.find_elements("css selector", 'tr[data-topic="audit"]')
    assert not driver.find_elements("css selector", 'tr[data-group="auditors"]')
    driver.find_element("css selector", 'tr[data-group="billing"]').click()
    wait_for(driver, '[data-lag-queue="billing/orders/0"]')
    assert displayed_admin_actions(driver) == []
    assert not driver.find_elements("css selector", "form.reset")
    look_up(driver, "key", topic="audit", key="audit-1")
    wait_text(driver, "#lookup-result .error", "may not see topic 'audit'")
    save(driver, "console-user.png")
    assert browser_errors(driver) == [] or all("403" in e for e in browser_errors(driver))

    # signing out forgets the keys: the login form again
    driver.find_element("id", "sign-out").click()
    assert wait_for(driver, "#login").is_displayed()
    assert driver.execute_script("return sessionStorage.length") == 0
