"""Storage for agent frameworks: each module is one framework's history store,
kept in chatarchive's rows, behind an optional extra (``pip install
'chatarchive[langchain]'``)."""


def extra_missing(module: str, framework: str, extra: str) -> ImportError:
    """The error the integration ``module`` (its ``__name__``) raises when its
    framework cannot be imported: what it needs, and the extra that installs it."""
    return ImportError(f"{module} needs {framework}: pip install 'chatarchive[{extra}]'")
