"""Role names matched by one rule: `Profiles` (what `load_profiles` returns), `RoleNames` and `select_rows` (the rows
of some roles).

The same role is spelled many ways: `Dr. Frank-N-Furter` in the release's rows and `Dr. Frank N Furter` in its
profiles, `José` typed in decomposed Unicode (NFD) or composed (NFC), `Odessa` for the card `Odessa Flint`, the cue
`ADA` of a screenplay for `Ada Quill`. Every stage finds a role the same way, by trying in order:

1. the exact name;
2. the name's key (`rolellm.roles.profile.role_key`): Unicode NFKC form, case, spaces and punctuation ignored
   (`dr frank n furter` finds `Dr. Frank-N-Furter`, NFD finds NFC);
3. an alias of the role: a Character Card's `name` and V3 `nickname` (`extra["character_card"]`), by their key;
4. the first name: a name of one word finds the role whose full name starts with it, as screenplays cue characters
   (`Odessa` or the cue `ODESSA` finds `Odessa Flint`).

The first step that finds anything decides: one role is the match; several are an `AmbiguousRoleError` naming them
(two roles called `Ada ...` asked for by `ADA`). A name no step finds is an `UnknownRoleError` (a `KeyError`) naming
the roles there are.

>>> from rolellm.roles.profile import RoleProfile
>>> profiles = Profiles({name: RoleProfile(name, "en") for name in ["Dr. Frank-N-Furter", "Odessa Flint", "José"]})
>>> [profiles.find(name) for name in ["Dr. Frank N Furter", "ODESSA", "Jose\\u0301", "Riff Raff"]]
['Dr. Frank-N-Furter', 'Odessa Flint', 'José', None]
>>> "odessa flint" in profiles, sorted(profiles), len(profiles)
(True, ['Dr. Frank-N-Furter', 'José', 'Odessa Flint'], 3)
>>> profiles["Riff Raff"]
Traceback (most recent call last):
...
rolellm.roles.lookup.UnknownRoleError: role 'Riff Raff' is not in the profiles; roles found: ['Dr. Frank-N-Furter', 'José', 'Odessa Flint']
"""

from collections.abc import Iterable, Iterator, Mapping

from rolellm.roles.card_prompts import card_data
from rolellm.roles.profile import RoleProfile, role_key


class UnknownRoleError(KeyError, ValueError):
    """No role of that name (by the matching rule); the message lists the roles there are. A `KeyError`, so
    `profiles.get(name)` and `name in profiles` work, and a `ValueError`, as every other bad argument."""

    def __str__(self):
        return str(self.args[0])


class AmbiguousRoleError(LookupError, ValueError):
    """A name that matches several roles at the same step of the rule; the message names them. Not a `KeyError`:
    `profiles.get(name)` raises it rather than pretending the role is absent."""


def _first_word(name: str) -> str | None:
    words = name.split()
    return words[0] if len(words) > 1 else None


class RoleNames:
    """A set of role names, looked up by the module's rule (exact, key, alias, first name).

    Args:
        names (`Iterable[str]`): the names (a dataset's `role` column, a mapping's keys); repeats are kept once.
        aliases (`Mapping[str, Iterable[str]]`, *optional*): other names of a role (a card's nickname), by name.
        where (`str`, *optional*, defaults to `"the profiles"`): what holds the names, for error messages.

    >>> names = RoleNames(["Ada Quill", "Moss Brindle"], where="the data")
    >>> names.find("ADA"), names.resolve("moss-brindle")
    ('Ada Quill', 'Moss Brindle')
    """

    def __init__(self, names: Iterable[str], aliases: Mapping[str, Iterable[str]] | None = None, where: str = ""):
        self.names = list(dict.fromkeys(names))
        self.where = where or "the profiles"
        self._exact = dict.fromkeys(self.names)  # a dict, not a set: pickles the same in every process (fingerprints)
        self._steps: list[dict[str, list[str]]] = [{}, {}, {}]  # key, alias, first name -> names
        for name in self.names:
            others = [alias for alias in (aliases or {}).get(name, ()) if alias != name]
            for step, spellings in enumerate(([name], others, [_first_word(name)])):
                for spelling in spellings:
                    key = role_key(spelling) if spelling else ""
                    if key and name not in self._steps[step].setdefault(key, []):
                        self._steps[step][key].append(name)

    def find(self, name: str) -> str | None:
        """The one name `name` matches, or `None`; several matches at one step are an `AmbiguousRoleError`."""
        if name in self._exact:
            return name
        key = role_key(name)
        for step in self._steps:
            found = step.get(key, [])
            if len(found) > 1:
                raise AmbiguousRoleError(
                    f"role {name!r} matches several roles of {self.where}: {found}; give the full name"
                )
            if found:
                return found[0]
        return None

    def resolve(self, name: str) -> str:
        """`find`, with an `UnknownRoleError` naming the known roles when nothing matches."""
        found = self.find(name)
        if found is None:
            raise UnknownRoleError(f"role {name!r} is not in {self.where}; roles found: {sorted(self.names)}")
        return found

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def card_aliases(profile: RoleProfile) -> list[str]:
    """The other names of a profile read from a Character Card: the card's `name` and V3 `nickname`."""
    data = card_data(profile) or {}
    return [data[field] for field in ("name", "nickname") if isinstance(data.get(field), str) and data[field].strip()]


class Profiles(Mapping[str, RoleProfile]):
    """Role name -> `RoleProfile`, in the order read, that finds a role by the module's rule.

    `profiles[name]`, `profiles.get(name)` and `name in profiles` match `name` by the rule; iteration, `len`,
    `keys()`, `items()` and `==` are those of the underlying dict (names as the sources spell them).

    Args:
        profiles (`Mapping[str, RoleProfile]` or pairs, *optional*): the profiles, by name.
        where (`str`, *optional*): what the profiles were read from, for error messages (defaults to that of
            `profiles` when it is a `Profiles`, else `"the profiles"`).
    """

    def __init__(self, profiles: Mapping[str, RoleProfile] | Iterable = (), where: str | None = None):
        if isinstance(profiles, Profiles) and where is None:  # the same profiles: their index as it is
            self._profiles, self.names = profiles._profiles, profiles.names
            return
        self._profiles = dict(profiles)
        where = where or (profiles.where if isinstance(profiles, Profiles) else "the profiles")
        aliases = {name: card_aliases(profile) for name, profile in self._profiles.items()}
        self.names = RoleNames(self._profiles, aliases, where)

    @property
    def where(self) -> str:
        return self.names.where

    def find(self, name: str) -> str | None:
        """The name under which `name`'s profile is kept, or `None` (see `RoleNames.find`)."""
        return self.names.find(name)

    def resolve(self, name: str) -> str:
        """The name under which `name`'s profile is kept; an `UnknownRoleError` lists the known roles."""
        return self.names.resolve(name)

    def require(self, roles: Iterable[str], rows: str = "the rows", hint: str = "pass profiles that cover every role"):
        """These profiles, once every name of `roles` finds one; else a `ValueError` that counts the roles with none
        and names them (ten at most), with the roles the profiles hold and `hint`, what to do about it.

        >>> Profiles({"Po": RoleProfile("Po", "en")}).require(["po", "Shifu"], "the data", "pass --profiles")
        Traceback (most recent call last):
        ...
        ValueError: no profile for 1 role(s) of the data: ['Shifu']; the profiles hold ['Po']: pass --profiles
        """
        missing = sorted({role for role in roles if role not in self})
        if missing:
            held = sorted(self)
            raise ValueError(
                f"no profile for {len(missing)} role(s) of {rows}: {missing[:10]}{' ...' if len(missing) > 10 else ''}; "
                f"the profiles hold {held[:10]}{' ...' if len(held) > 10 else ''}: {hint}"
            )
        return self

    def __getitem__(self, name: str) -> RoleProfile:
        return self._profiles[self.resolve(name)]

    def __contains__(self, name) -> bool:
        return name in self.names

    def get(self, name: str, default=None):
        found = self.find(name)
        return default if found is None else self._profiles[found]

    def __iter__(self) -> Iterator[str]:
        return iter(self._profiles)

    def __len__(self) -> int:
        return len(self._profiles)

    def __repr__(self) -> str:
        return f"Profiles({list(self._profiles)!r})"


def same_role(name: str, role: str | RoleProfile) -> bool:
    """Whether `name` finds `role` (a name, or a profile with its card's aliases) by the module's rule.

    >>> same_role("Dr. Frank N Furter", "Dr. Frank-N-Furter"), same_role("ADA", "Ada Quill"), same_role("Po", "Shifu")
    (True, True, False)
    """
    if isinstance(role, RoleProfile):
        return name == role.name or Profiles({role.name: role}).find(name) is not None
    return name == role or RoleNames([role]).find(name) is not None


def repeated_names(names: Iterable[str]) -> list[tuple[str, str]]:
    """The names of a list of full names that name one character twice, as `(first, again)` pairs: the same name, or
    the same by its key (steps 1 and 2 of the rule: case, spaces, punctuation and Unicode form ignored). First names
    and aliases are not compared: in a scene's list of characters `Ada` may be another person than `Ada Quill`.

    >>> repeated_names(["Mr. Darcy", "Elizabeth", "Elizabeth Bennet", "mr darcy", "Elizabeth"])
    [('Mr. Darcy', 'mr darcy'), ('Elizabeth', 'Elizabeth')]
    """
    seen, repeated = {}, []
    for name in names:
        key = role_key(name) or name  # a name of punctuation alone has no key: compared as it is
        if key in seen:
            repeated.append((seen[key], name))
        else:
            seen[key] = name
    return repeated


def select_rows(dataset, roles=None, max_samples_per_role=None) -> list[dict]:
    """The rows to answer, in dataset order: only `roles`, and at most `max_samples_per_role` per (role, subset).

    >>> rows = [{"role": "李白", "subset": "general", "question": "你好"}, {"role": "李白", "subset": "general",
    ...          "question": "再见"}, {"role": "张飞", "subset": "general", "question": "你好"}]
    >>> [row["question"] for row in select_rows(rows, max_samples_per_role=1)]
    ['你好', '你好']

    `dataset` is a `datasets.Dataset` or a list of row dicts. Roles are matched by this module's rule
    (`"Dr. Frank N Furter"` selects the rows of `"Dr. Frank-N-Furter"`).
    """
    known = RoleNames((row["role"] for row in dataset), where="the dataset")
    found = {role: known.find(role) for role in roles or []}
    unknown = sorted(role for role, name in found.items() if name is None)
    if unknown:
        raise ValueError(f"roles={unknown} are not in the dataset; its roles are {sorted(known)}")
    wanted = set(found.values())
    rows, seen = [], {}
    for row in dataset:
        if wanted and row["role"] not in wanted:
            continue
        key = (row["role"], row["subset"])
        seen[key] = seen.get(key, 0) + 1
        if max_samples_per_role is None or seen[key] <= max_samples_per_role:
            rows.append(row)
    return rows


__all__ = [
    "AmbiguousRoleError", "Profiles", "RoleNames", "UnknownRoleError", "card_aliases", "repeated_names", "same_role",
    "select_rows",
]  # fmt: skip
