"""Consecutive invoice numbers, decided in memory."""

from __future__ import annotations

from examples.dcb.invoices import CreateInvoice, InvoiceCreated, NextInvoiceNumber, invoices
from reventless.testing import fold_model, given_dcb, tagged


def test_the_first_invoice_is_number_one_and_the_next_follows_the_last() -> None:
    given_dcb(invoices).when(CreateInvoice(customer="ada", amount_cents=100)).then(
        InvoiceCreated(number=1, customer="ada", amount_cents=100)
    )
    past = [InvoiceCreated(number=n, customer="x", amount_cents=1) for n in (1, 2, 3)]
    given_dcb(invoices, *past).when(CreateInvoice(customer="bob", amount_cents=5)).then(
        InvoiceCreated(number=4, customer="bob", amount_cents=5)
    )
    given_dcb(invoices).when(CreateInvoice(customer="ada", amount_cents=0)).then_rejected(
        "bad_amount"
    )


def test_extra_tags_do_not_hide_an_invoice_from_the_type_query() -> None:
    past = tagged(InvoiceCreated(number=1, customer="x", amount_cents=1), "batch:7")
    assert fold_model(NextInvoiceNumber(), past) == 2
