"""Who may read the metrics: the bearer token of each request authenticated by the API
server (a TokenReview) and the user it names authorized there (a SubjectAccessReview for
``get`` on the request's non-resource path), as controller-runtime's
``filters.WithAuthenticationAndAuthorization`` does. A Prometheus whose ServiceAccount is
bound to a ClusterRole with ``nonResourceURLs: ["/metrics"], verbs: ["get"]`` may scrape.

Answers, as controller-runtime gives them:

- no bearer token, or one the API server does not authenticate: 401 ``Unauthorized``;
- an authenticated user who may not ``get`` the path: 403;
- the API server cannot be asked: 500, with one log line (the next scrape asks again).

Answers are cached, so a scrape every few seconds costs the API server about one review a
minute: authenticated tokens for ``authenticated_ttl`` (a minute, as controller-runtime),
refused ones for ``refused_ttl``; allowed users for ``allowed_ttl`` (five minutes) and
denied ones for ``denied_ttl`` (thirty seconds). Tokens are kept as their SHA-256 only.

It knows nothing of what is served behind it.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import TTLCache

from ome.kube import JSON, Resource

from .client import describe_error

log = logging.getLogger(__name__)

TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", namespaced=False)
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", namespaced=False
)

#: Creates a review and returns what the API server answered (its ``status`` filled in).
Review = Callable[[Resource, JSON], JSON]

UNAUTHORIZED = "Unauthorized"


def forbidden(user: str, verb: str, path: str) -> str:
    return f"Authorization denied for user {user} ({verb} {path})"


def authentication_failed() -> str:
    return "Authentication failed: the API server could not review the token"


def authorization_failed(user: str) -> str:
    return f"Authorization for user {user} failed: the API server could not review it"


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Answer:
    """An HTTP status and, when it is not 200, the text to send."""

    status: int
    text: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 200


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def user_of(review: JSON) -> User | None:
    """The user a TokenReview's status authenticated, or None."""
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return None
    user = status.get("user") or {}
    name = user.get("username")
    if not isinstance(name, str) or not name:
        return None
    extra = user.get("extra") or {}
    return User(
        name=name,
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra=tuple(sorted((str(k), tuple(str(x) for x in v or ())) for k, v in extra.items())),
    )


def token_review(token: str) -> JSON:
    return {
        "apiVersion": TOKEN_REVIEWS.api_version,
        "kind": "TokenReview",
        "spec": {"token": token},
    }


def access_review(user: User, verb: str, path: str) -> JSON:
    spec: JSON = {
        "user": user.name,
        "groups": list(user.groups),
        "nonResourceAttributes": {"path": path, "verb": verb},
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra}
    return {
        "apiVersion": SUBJECT_ACCESS_REVIEWS.api_version,
        "kind": "SubjectAccessReview",
        "spec": spec,
    }


class DelegatingAuth:
    """Authenticates and authorizes requests by asking the API server, with the answers
    cached (see the module's docstring for how long).

    Shared by the server's connection threads. Invariant: the four caches are read and
    written only under ``_lock`` (cachetools' caches are not thread-safe); the reviews
    themselves are sent outside it, so one slow review holds up no other request."""

    def __init__(
        self,
        review: Review,
        *,
        authenticated_ttl: float = 60.0,
        refused_ttl: float = 10.0,
        allowed_ttl: float = 300.0,
        denied_ttl: float = 30.0,
        maxsize: int = 1024,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._review = review
        self._lock = threading.Lock()
        self._users: TTLCache[str, User] = TTLCache(maxsize, authenticated_ttl, timer)
        self._refused: TTLCache[str, bool] = TTLCache(maxsize, refused_ttl, timer)
        self._allowed: TTLCache[tuple[User, str, str], bool] = TTLCache(maxsize, allowed_ttl, timer)
        self._denied: TTLCache[tuple[User, str, str], bool] = TTLCache(maxsize, denied_ttl, timer)

    def check(self, authorization: str | None, verb: str, path: str) -> Answer:
        """The answer to a request with this ``Authorization`` header for ``verb path``."""
        token = bearer_token(authorization)
        if token is None:
            return Answer(401, UNAUTHORIZED)
        user = self._authenticate(hashlib.sha256(token.encode()).hexdigest(), token)
        if isinstance(user, Answer):
            return user
        return self._authorize(user, verb, path)

    def _authenticate(self, digest: str, token: str) -> User | Answer:
        with self._lock:
            user = self._users.get(digest)
            refused = self._refused.get(digest)
        if user is not None:
            return user
        if refused:
            return Answer(401, UNAUTHORIZED)
        try:
            answer = self._review(TOKEN_REVIEWS, token_review(token))
        except Exception as e:
            why = describe_error(e)
            log.warning("a metrics request was not served: TokenReview failed: %s", why)
            return Answer(500, authentication_failed())
        user = user_of(answer)
        with self._lock:
            if user is None:
                self._refused[digest] = True
            else:
                self._users[digest] = user
        return user if user is not None else Answer(401, UNAUTHORIZED)

    def _authorize(self, user: User, verb: str, path: str) -> Answer:
        key = (user, verb, path)
        with self._lock:
            allowed, denied = self._allowed.get(key), self._denied.get(key)
        if allowed:
            return Answer(200)
        if denied:
            return Answer(403, forbidden(user.name, verb, path))
        try:
            answer = self._review(SUBJECT_ACCESS_REVIEWS, access_review(user, verb, path))
        except Exception as e:
            log.warning(
                "a metrics request of %s was not served: SubjectAccessReview failed: %s",
                user.name,
                describe_error(e),
            )
            return Answer(500, authorization_failed(user.name))
        ok = bool((answer.get("status") or {}).get("allowed"))
        with self._lock:
            (self._allowed if ok else self._denied)[key] = True
        return Answer(200) if ok else Answer(403, forbidden(user.name, verb, path))
