"""GPU Portal's Django project: settings, URLs, the Celery app, roles and the base layout."""

from portal.celery import app as celery_app

__all__ = ("celery_app",)
