"""Storage for agent frameworks: each module is one framework's history store,
kept in chatarchive's rows, behind an optional extra (``pip install
'chatarchive[langchain]'``)."""
