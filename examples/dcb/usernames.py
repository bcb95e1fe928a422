"""Unique usernames: claim, release, re-claim; never two owners of one name.

The rules (dcb.events, "Unique username"): an account registers with a username nobody
holds; it may change to another free username (releasing the old one) and closing the
account releases its username, which anyone may claim again. The uniqueness spans all
accounts: the decision reads only the events tagged with the username it wants.

Example::

    app = rv.App(store="sqlite:///accounts.db")
    log = app.dcb_log("accounts", events=EVENTS)
    log.include(accounts)
    async with app:
        await log.execute(RegisterAccount(account_id="a1", username="ada"))
"""

from __future__ import annotations

from typing import Annotated, NamedTuple

import reventless as rv


class AccountRegistered(rv.Event):
    account_id: Annotated[str, rv.Tag("account")]
    username: Annotated[str, rv.Tag("username")]


class UsernameChanged(rv.Event):
    account_id: Annotated[str, rv.Tag("account")]
    old_username: Annotated[str, rv.Tag("username")]
    new_username: Annotated[str, rv.Tag("username")]


class AccountClosed(rv.Event):
    account_id: Annotated[str, rv.Tag("account")]
    username: Annotated[str, rv.Tag("username")]


EVENTS = AccountRegistered | UsernameChanged | AccountClosed


class RegisterAccount(rv.Command):
    account_id: str
    username: str


class ChangeUsername(rv.Command):
    account_id: str
    username: str


class CloseAccount(rv.Command):
    account_id: str


# -- decision models ---------------------------------------------------------------------


class UsernameOwner(rv.DecisionModel[str | None]):
    """The account holding the username now; None if it is free."""

    def __init__(self, username: str) -> None:
        super().__init__(None, tags=[f"username:{username}"])
        self.username = username

    @rv.folds(AccountRegistered)
    def _registered(self, owner: str | None, e: AccountRegistered) -> str | None:
        return e.account_id

    @rv.folds(UsernameChanged)
    def _changed(self, owner: str | None, e: UsernameChanged) -> str | None:
        return e.account_id if e.new_username == self.username else None

    @rv.folds(AccountClosed)
    def _closed(self, owner: str | None, e: AccountClosed) -> str | None:
        return None


class Account(NamedTuple):
    """An account as its decisions see it."""

    exists: bool = False
    username: str = ""
    closed: bool = False


class AccountState(rv.DecisionModel[Account]):
    """Whether the account exists, its username, whether it is closed."""

    def __init__(self, account_id: str) -> None:
        super().__init__(Account(), tags=[f"account:{account_id}"])

    @rv.folds(AccountRegistered)
    def _registered(self, state: Account, e: AccountRegistered) -> Account:
        return Account(True, e.username)

    @rv.folds(UsernameChanged)
    def _changed(self, state: Account, e: UsernameChanged) -> Account:
        return state._replace(username=e.new_username)

    @rv.folds(AccountClosed)
    def _closed(self, state: Account, e: AccountClosed) -> Account:
        return state._replace(closed=True)


# -- command handlers --------------------------------------------------------------------

accounts = rv.Decider(events=EVENTS, name="accounts")


@accounts.decides(RegisterAccount, account=AccountState, owner=UsernameOwner)
def register(cmd: RegisterAccount, account: Account, owner: str | None) -> AccountRegistered:
    if account.exists:
        raise rv.Rejected("account_exists", f"account {cmd.account_id} exists")
    if owner is not None:
        raise rv.Rejected("username_claimed", f"{cmd.username!r} is taken")
    return AccountRegistered(account_id=cmd.account_id, username=cmd.username)


@accounts.decides(ChangeUsername, account=AccountState, owner=UsernameOwner)
def change(cmd: ChangeUsername, account: Account, owner: str | None) -> UsernameChanged | None:
    if not account.exists or account.closed:
        raise rv.Rejected("no_such_account", f"account {cmd.account_id} is not open")
    if account.username == cmd.username:
        return None  # nothing changes
    if owner is not None:
        raise rv.Rejected("username_claimed", f"{cmd.username!r} is taken")
    return UsernameChanged(
        account_id=cmd.account_id, old_username=account.username, new_username=cmd.username
    )


@accounts.decides(CloseAccount, account=AccountState)
def close(cmd: CloseAccount, account: Account) -> AccountClosed:
    if not account.exists or account.closed:
        raise rv.Rejected("no_such_account", f"account {cmd.account_id} is not open")
    return AccountClosed(account_id=cmd.account_id, username=account.username)
