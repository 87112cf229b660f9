"""The real servers the single sign-on tests log in against, each started on a free loopback
port in a temporary folder of its own and stopped by its fixture:

- ``OidcProvider``: the test OpenID Connect provider (``tests/sso/provider/``) in its own
  process, with an RS256 key, a secret key and a control token made at run time;
- ``Slapd``: Debian's OpenLDAP server with a generated ``slapd.conf`` (an mdb database under
  the folder), loaded with ``ldapadd``.

A Debian package a server needs that is missing fails the test in CI (``CI`` set) and skips it
elsewhere, naming the package: ``make test`` and ``.ci/run`` install it."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.conftest import ROOT
from tests.faults.processes import free_port, wait_until


def require_program(path: str, package: str) -> str:
    """The program's path; a missing one fails in CI and skips elsewhere, naming the package."""
    found = shutil.which(path) or (path if os.access(path, os.X_OK) else None)
    if found is None:
        message = f"{path} is missing: apt-get install {package} (make test installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def _rsa_private_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@dataclass
class OidcProvider:
    """The test provider, on ``http://127.0.0.1:<port>/o`` (its issuer)."""

    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="portal-idp-")))
    port: int = field(default_factory=free_port)
    control_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return f"{self.url}/o"

    def start(self) -> OidcProvider:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "tests.sso.provider.settings",
            "IDP_STATE_DIR": str(self.directory),
            "IDP_ISSUER": self.issuer,
            "IDP_CONTROL_TOKEN": self.control_token,
            "IDP_SECRET_KEY": secrets.token_urlsafe(40),
            "IDP_RSA_PRIVATE_KEY": _rsa_private_key_pem(),
        }
        log = (self.directory / "provider.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.sso.provider", str(self.port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._answers, seconds=60, what=f"the test provider answers ({self.log()})")
        return self

    def _answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"the test provider exited: {self.log()}")
        try:
            response = requests.get(f"{self.issuer}/.well-known/openid-configuration", timeout=2)
        except requests.ConnectionError:
            return False
        return response.status_code == 200

    def log(self) -> str:
        path = self.directory / "provider.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def control(self, path: str, body: dict[str, Any]) -> None:
        response = requests.put(
            f"{self.url}/test/{path}",
            json=body,
            headers={"Authorization": f"Bearer {self.control_token}"},
            timeout=10,
        )
        assert response.status_code == 200, response.text

    def register_client(
        self, *, client_id: str, client_secret: str, redirect_uri: str, post_logout_uri: str
    ) -> None:
        self.control(
            "client",
            {
                "client_id": client_id,
                "client_secret": client_secret,
                "redirect_uris": [redirect_uri],
                "post_logout_redirect_uris": [post_logout_uri],
            },
        )

    def person(self, username: str, *, password: str, groups: list[str], **fields: str) -> None:
        self.control(f"users/{username}", {"password": password, "groups": groups, **fields})

    def knobs(self, **values: Any) -> None:
        self.control("knobs", values)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)
        shutil.rmtree(self.directory, ignore_errors=True)


SLAPD = "/usr/sbin/slapd"
SCHEMAS = ("core", "cosine", "inetorgperson", "nis")


@dataclass
class Slapd:
    """OpenLDAP's slapd under ``dc=gpu,dc=test``: people under ``ou=people``, groups
    (``groupOfNames``) under ``ou=groups``."""

    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="portal-ldap-")))
    port: int = field(default_factory=free_port)
    admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    process: subprocess.Popen[bytes] | None = None
    suffix: str = "dc=gpu,dc=test"

    @property
    def uri(self) -> str:
        return f"ldap://127.0.0.1:{self.port}"

    @property
    def admin_dn(self) -> str:
        return f"cn=admin,{self.suffix}"

    def start(self) -> Slapd:
        slapd = require_program(SLAPD, "slapd")
        require_program("ldapadd", "ldap-utils")
        data = self.directory / "data"
        data.mkdir()
        includes = "\n".join(f"include /etc/ldap/schema/{s}.schema" for s in SCHEMAS)
        config = self.directory / "slapd.conf"
        config.write_text(
            f"{includes}\n"
            f"pidfile {self.directory}/slapd.pid\n"
            "modulepath /usr/lib/ldap\n"
            "moduleload back_mdb\n"
            "database mdb\n"
            "maxsize 10485760\n"
            f'suffix "{self.suffix}"\n'
            f'rootdn "{self.admin_dn}"\n'
            f"rootpw {self.admin_password}\n"
            f"directory {data}\n"
            # People bind as themselves; anybody may search (the portal's bind is anonymous).
            "access to attrs=userPassword by self write by anonymous auth by * none\n"
            "access to * by * read\n"
        )
        log = (self.directory / "slapd.log").open("wb")
        # -d 0: stay in the foreground (the fixture stops this very process), no debug output.
        self.process = subprocess.Popen(
            [slapd, "-f", str(config), "-h", f"{self.uri}/", "-d", "0"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._answers, seconds=30, what=f"slapd answers ({self.log()})")
        self.ldif(
            "add",
            f"dn: {self.suffix}\nobjectClass: dcObject\nobjectClass: organization\n"
            "o: GPU test\ndc: gpu\n\n"
            f"dn: ou=people,{self.suffix}\nobjectClass: organizationalUnit\nou: people\n\n"
            f"dn: ou=groups,{self.suffix}\nobjectClass: organizationalUnit\nou: groups\n",
        )
        return self

    def _answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"slapd exited: {self.log()}")
        result = subprocess.run(
            ["ldapsearch", "-x", "-H", self.uri, "-b", "", "-s", "base", "-LLL"],
            capture_output=True,
            timeout=10,
        )
        return result.returncode == 0

    def log(self) -> str:
        path = self.directory / "slapd.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def ldif(self, operation: str, text: str) -> None:
        """``ldapadd`` or ``ldapmodify`` the LDIF ``text`` as the directory's administrator."""
        program = {"add": "ldapadd", "modify": "ldapmodify"}[operation]
        result = subprocess.run(
            [program, "-x", "-H", self.uri, "-D", self.admin_dn, "-w", self.admin_password],
            input=text.encode(),
            capture_output=True,
            timeout=30,
        )
        assert result.returncode == 0, result.stderr.decode()

    def person_dn(self, uid: str) -> str:
        return f"uid={uid},ou=people,{self.suffix}"

    def person(self, uid: str, *, password: str, given: str, surname: str) -> None:
        self.ldif(
            "add",
            f"dn: {self.person_dn(uid)}\nobjectClass: inetOrgPerson\nuid: {uid}\n"
            f"cn: {given} {surname}\ngivenName: {given}\nsn: {surname}\n"
            f"mail: {uid}@gpu.test\nuserPassword: {password}\n",
        )

    def group(self, cn: str, members: list[str]) -> None:
        lines = "".join(f"member: {self.person_dn(m)}\n" for m in members)
        self.ldif(
            "add",
            f"dn: cn={cn},ou=groups,{self.suffix}\nobjectClass: groupOfNames\ncn: {cn}\n{lines}",
        )

    def group_members(self, cn: str, members: list[str]) -> None:
        """Make ``members`` the group's members, exactly (a groupOfNames needs one at least)."""
        lines = "".join(f"member: {self.person_dn(m)}\n" for m in members)
        self.ldif(
            "modify",
            f"dn: cn={cn},ou=groups,{self.suffix}\nchangetype: modify\nreplace: member\n{lines}",
        )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)
        shutil.rmtree(self.directory, ignore_errors=True)


# The provider's login form, as a person fills it in.
_CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def provider_sign_in(
    session: requests.Session, response: requests.Response, *, username: str, password: str
) -> requests.Response:
    """Fill in and send the provider's login form ``response`` shows; the redirects are
    followed back to the portal."""
    assert "Test identity provider" in response.text, response.text[:500]
    token = _CSRF.search(response.text)
    assert token is not None
    return session.post(
        response.url,
        data={"csrfmiddlewaretoken": token.group(1), "username": username, "password": password},
        timeout=30,
    )
