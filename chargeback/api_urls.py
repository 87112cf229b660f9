from django.urls import path

from chargeback import apis

urlpatterns = [path("", apis.ChargebackView.as_view(), name="chargeback-api")]
