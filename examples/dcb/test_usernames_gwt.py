"""Unique usernames, decided in memory: claim, release, re-claim."""

from __future__ import annotations

from examples.dcb.usernames import (
    Account,
    AccountClosed,
    AccountRegistered,
    AccountState,
    ChangeUsername,
    CloseAccount,
    RegisterAccount,
    UsernameChanged,
    UsernameOwner,
    accounts,
)
from reventless.testing import fold_model, given_dcb


def registered(account: str, name: str) -> AccountRegistered:
    return AccountRegistered(account_id=account, username=name)


def test_claim_a_free_username() -> None:
    given_dcb(accounts).when(RegisterAccount(account_id="a1", username="ada")).then(
        registered("a1", "ada")
    )
    given_dcb(accounts, registered("a1", "ada")).when(
        RegisterAccount(account_id="a2", username="ada")
    ).then_rejected("username_claimed")
    given_dcb(accounts, registered("a1", "ada")).when(
        RegisterAccount(account_id="a1", username="bob")
    ).then_rejected("account_exists")


def test_closing_releases_the_name_for_a_re_claim() -> None:
    past = [registered("a1", "ada")]
    closed = (
        given_dcb(accounts, *past)
        .when(CloseAccount(account_id="a1"))
        .then(AccountClosed(account_id="a1", username="ada"))
    )
    given_dcb(accounts, *past, *closed).when(RegisterAccount(account_id="a2", username="ada")).then(
        registered("a2", "ada")
    )
    given_dcb(accounts, *past, *closed).when(CloseAccount(account_id="a1")).then_rejected(
        "no_such_account"
    )


def test_changing_a_username_claims_the_new_one_and_releases_the_old() -> None:
    past = [registered("a1", "ada"), registered("a2", "bob")]
    given_dcb(accounts, *past).when(ChangeUsername(account_id="a1", username="bob")).then_rejected(
        "username_claimed"
    )
    changed = UsernameChanged(account_id="a1", old_username="ada", new_username="lovelace")
    given_dcb(accounts, *past).when(ChangeUsername(account_id="a1", username="lovelace")).then(
        changed
    )
    given_dcb(accounts, *past, changed).when(RegisterAccount(account_id="a3", username="ada")).then(
        registered("a3", "ada")
    )
    given_dcb(accounts, *past, changed).when(
        RegisterAccount(account_id="a3", username="lovelace")
    ).then_rejected("username_claimed")
    given_dcb(accounts, *past).when(ChangeUsername(account_id="a1", username="ada")).then()
    given_dcb(accounts).when(ChangeUsername(account_id="a9", username="x")).then_rejected(
        "no_such_account"
    )


def test_models() -> None:
    changed = UsernameChanged(account_id="a1", old_username="ada", new_username="lovelace")
    past = [registered("a1", "ada"), changed]
    assert fold_model(UsernameOwner("ada"), *past) is None
    assert fold_model(UsernameOwner("lovelace"), *past) == "a1"
    assert fold_model(AccountState("a1"), *past) == Account(True, "lovelace", False)
