"""The member's Usage page: the chargeback report of their own teams, at /usage/."""

from django.urls import path

from chargeback import views

urlpatterns = [path("", views.report, name="usage")]
