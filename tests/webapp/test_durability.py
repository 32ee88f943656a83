"""Issue 4 durability: an acknowledged answer survives SIGKILL of the server (it was fsync'd before the
response), and the restarted server resumes at the next candidate."""

from __future__ import annotations

import signal

import httpx
from confirm_fixture import form_fields, free_port, start_server, stop_server

from noisycal_platform.confirm_app import add_annotator

Q = "/q/derm/irrelevant"


def test_answer_survives_sigkill_and_session_resumes(fx):
    _token, login_path = add_annotator(fx.home, "e1", "expert")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(fx.home, port)
    try:
        with httpx.Client(base_url=base, timeout=10) as c:
            assert c.get(login_path).status_code == 200
            fields = form_fields(c.get(Q).text)
            assert fields["position"] == "0"
            r = c.post(Q + "/answer", data={**fields, "answer": "yes"})
            assert r.status_code == 303  # acknowledged ...
            proc.send_signal(signal.SIGKILL)  # ... and killed at once
            proc.wait(timeout=10)
            assert proc.returncode == -signal.SIGKILL
            recs = fx.records("e1")
            assert [(x["position"], x["answer"], x["item_id"]) for x in recs] == [
                (0, "yes", fields["item_id"])]

            proc = start_server(fx.home, port)
            page = c.get(Q).text  # the same browser cookie works after the restart
            assert form_fields(page)["position"] == "1"
            assert 'id="answered"' not in page  # progress is not shown to annotators (Gröger et al. 2023 App. E)
            # the session's CSRF token is derived from the cookie, not kept in memory: the same after restart
            assert form_fields(page)["csrf"] == fields["csrf"]
            r = c.post(Q + "/answer", data={**form_fields(page), "answer": "no"})
            assert r.status_code == 303
            assert [x["answer"] for x in fx.records("e1")] == ["yes", "no"]
    finally:
        stop_server(proc)
