"""#35's site.toml [notify]: what it takes, and each refusal in one sentence naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmjudge.config import load_site
from vmjudge.config.notify import NotifySite, SmtpSite
from vmjudge.errors import ConfigError


def site_with(tmp_path: Path, text: str):
    (tmp_path / "site.toml").write_text(text)
    return load_site(tmp_path)


def test_without_notify_nothing_is_sent(tmp_path):
    assert site_with(tmp_path, "").notify == NotifySite()
    assert not NotifySite().email


def test_a_whole_notify_table(tmp_path):
    n = site_with(tmp_path, '[notify]\norganisers = ["ops@example.org", "a.b+judge@mail.example.org"]\n'
                            'webhooks = ["https://hooks.example.org/vmjudge", "http://127.0.0.1:8080/hook"]\n'
                            'webhook_secret_file = "/etc/vmjudge/webhook.secret"\nportal_url = "https://judge.example.org/"\n'
                            'max_tries = 5\nretry_seconds = 30\ngive_up_hours = 12\ntimeout_seconds = 10\n'
                            '[notify.smtp]\nhost = "smtp.example.org"\nsecurity = "tls"\nfrom = "judge@example.org"\n'
                            'credentials_file = "/etc/vmjudge/smtp.credentials"\n').notify
    assert n.organisers == ("ops@example.org", "a.b+judge@mail.example.org") and n.portal_url == "https://judge.example.org"
    assert n.webhooks == ("https://hooks.example.org/vmjudge", "http://127.0.0.1:8080/hook")
    assert (n.max_tries, n.retry_seconds, n.give_up_hours, n.timeout_seconds) == (5, 30.0, 12.0, 10.0)
    assert n.smtp == SmtpSite(host="smtp.example.org", port=465, security="tls", sender="judge@example.org",
                              credentials_file=Path("/etc/vmjudge/smtp.credentials"))


@pytest.mark.parametrize("text, sentence", [
    ('[notify]\norganisers = ["ops at example.org"]\n[notify.smtp]\nhost = "h"\n',
     "[notify] organisers has 'ops at example.org', which is not allowed: use plain addresses such as "
     "\"ops@example.org\"."),
    ('[notify]\nwebhooks = ["http://hooks.example.org/x"]\nwebhook_secret_file = "/s"\n',
     "[notify] webhooks' URL number 1 is not allowed: use an https:// URL without user:password@ (http:// only "
     "to this machine, such as http://127.0.0.1:8080/hook)."),  # never quoted: its path may hold its secret (#54)
    ('[notify]\nwebhooks = ["https://a.example.org/", "https://user:pw@hooks.example.org/x"]\n'
     'webhook_secret_file = "/s"\n', "[notify] webhooks' URL number 2 is not allowed"),
    ('[notify]\nwebhooks = "https://hooks.example.org/s3cret"\nwebhook_secret_file = "/s"\n',
     "[notify] webhooks is not allowed as written: use a list of https:// URLs"),
    ('[notify]\nwebhooks = ["https://hooks.example.org/x"]\n',
     "[notify] webhooks without webhook_secret_file is not allowed: name the file holding the secret their "
     "signatures are made with."),
    ('[notify]\norganisers = ["ops@example.org"]\n',
     "[notify] organisers without a [notify.smtp] table is not allowed"),
    ('[notify]\nmax_tries = 0\n', "[notify] max_tries = 0 is not allowed: use a whole number from 1 to 100."),
    ('[notify]\ntimeout_seconds = "fast"\n', "[notify] timeout_seconds = 'fast' is not allowed: use seconds"),
    ('[notify]\nwebhook_secret_file = "secret.txt"\n', "[notify] webhook_secret_file = 'secret.txt' is not allowed"),
    ('[notify]\ndisk_free_percent = 100\n',
     "[notify] disk_free_percent = 100 is not allowed: use a percentage above 0 and below 100."),
    ('[notify]\nretries = 3\n', "[notify] has unknown key(s) retries: remove or correct them."),
    ('[notify.smtp]\nport = 25\n', "[notify.smtp] has no host, which is not allowed: name the SMTP server."),
    ('[notify.smtp]\nhost = "smtp.example.org"\nsecurity = "none"\n',
     "[notify.smtp] security = \"none\" to 'smtp.example.org' is not allowed: use \"starttls\" or \"tls\" (plain "
     "SMTP only to a server on this machine)."),
    ('[notify.smtp]\nhost = "h"\nsecurity = "ssl"\n',
     "[notify.smtp] security = 'ssl' is not allowed: use \"starttls\", \"tls\" or \"none\"."),
    ('[notify.smtp]\nhost = "h"\nport = 70000\n', "[notify.smtp] port = 70000 is not allowed"),
    ('[notify.smtp]\nhost = "h"\nuser = "x"\n', "[notify.smtp] has unknown key(s) user: remove or correct them."),
])
def test_each_bad_value_is_one_sentence(tmp_path, text, sentence):
    with pytest.raises(ConfigError) as refused:
        site_with(tmp_path, text)
    said = str(refused.value)
    assert said.startswith(f"{tmp_path / 'site.toml'}: ") and sentence in said and "\n" not in said


def test_plain_smtp_to_this_machine_is_allowed(tmp_path):
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.53"):
        smtp = site_with(tmp_path, f'[notify.smtp]\nhost = "{host}"\nsecurity = "none"\nport = 2525\n').notify.smtp
        assert smtp is not None and smtp.security == "none" and smtp.port == 2525
