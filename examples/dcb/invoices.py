"""Consecutive invoice numbers: gapless and unique, decided from the last invoice.

The rule (dcb.events, "Invoice number"): every invoice gets the number after the last
one. The decision model's query is every ``InvoiceCreated`` (a type, no tag), so any
invoice created since the decision read makes its append fail, and the retry takes the
next number: numbers are unique and have no gaps, with no sequence outside the log.

Example::

    app = rv.App(store="sqlite:///invoices.db")
    log = app.dcb_log("invoices", events=InvoiceCreated)
    log.include(invoices)
    async with app:
        res = await log.execute(CreateInvoice(customer="ada", amount_cents=1200))
        assert res.events[0].number == 1
"""

from __future__ import annotations

from typing import Annotated

import reventless as rv


class InvoiceCreated(rv.Event):
    number: Annotated[int, rv.Tag("invoice")]
    customer: Annotated[str, rv.Tag("customer")]
    amount_cents: int


class CreateInvoice(rv.Command):
    customer: str
    amount_cents: int


class NextInvoiceNumber(rv.DecisionModel[int]):
    """The number the next invoice gets (1 for the first)."""

    def __init__(self) -> None:
        super().__init__(1)

    @rv.folds(InvoiceCreated)
    def _created(self, state: int, e: InvoiceCreated) -> int:
        return e.number + 1


invoices = rv.Decider(events=InvoiceCreated, name="invoices")


@invoices.decides(CreateInvoice, number=NextInvoiceNumber)
def create(cmd: CreateInvoice, number: int) -> InvoiceCreated:
    if cmd.amount_cents <= 0:
        raise rv.Rejected(
            "bad_amount", f"an invoice is for a positive amount, got {cmd.amount_cents}"
        )
    return InvoiceCreated(number=number, customer=cmd.customer, amount_cents=cmd.amount_cents)
