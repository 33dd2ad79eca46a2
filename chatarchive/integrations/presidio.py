"""Microsoft Presidio as a redactor (``pip install 'chatarchive[presidio]'``).

``PresidioRedactor`` gives the archive what Presidio's ``AnalyzerEngine``
finds: each result is a span of an entity type, replaced by a placeholder
stable within the chat (``chatarchive.redaction``), its kind the entity type
in lower case (``[EMAIL_ADDRESS_1a2b3c4d]``, ``[PERSON_...]``).

Without an analyzer of yours, the redactor makes one with Presidio's
pattern recognizers alone (e-mail addresses, phone numbers, credit cards,
IBANs, IP addresses, URLs, crypto wallets, and national numbers of several
countries) and no language model: nothing is downloaded. Names, places and
organisations need a named-entity model: give ``AnalyzerEngine()`` (which
loads spaCy's ``en_core_web_lg``, installed with ``python -m spacy download
en_core_web_lg``) or one configured as Presidio's documentation says.

Example:
    >>> from chatarchive.integrations.presidio import PresidioRedactor
    >>> redactor = PresidioRedactor(key=b"the application's key", entities=["EMAIL_ADDRESS", "CREDIT_CARD"])
    >>> redactor.redact("Card 4111 1111 1111 1111, mail ann@example.org", chat_id="c1")  # doctest: +ELLIPSIS
    'Card [CREDIT_CARD_...], mail [EMAIL_ADDRESS_...]'

Presidio's e-mail recognizer checks the domain against the public suffix
list (``tldextract``), which it fetches once per process and, offline,
takes from the copy it ships.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import extra_missing

try:
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NoOpNlpEngine
except ImportError as exc:  # the extra is missing
    raise extra_missing(__name__, "Microsoft Presidio (presidio-analyzer)", "presidio") from exc

from chatarchive.redaction import Finding, Redactor

__all__ = ["PresidioRedactor"]


class PresidioRedactor(Redactor):
    """What Presidio's analyzer finds, replaced before anything is stored.

    Args:
        key: the placeholders' key (see ``Redactor``).
        analyzer: the ``AnalyzerEngine`` to ask (default: Presidio's pattern
            recognizers, with no language model).
        entities: the entity types to find (default: every one the analyzer has).
        language: the language of the texts, as the analyzer knows it.
        score_threshold: the lowest score of a result that is redacted.
    """

    def __init__(
        self,
        key: bytes | str | None = None,
        *,
        analyzer: AnalyzerEngine | None = None,
        entities: Sequence[str] | None = None,
        language: str = "en",
        score_threshold: float = 0.5,
    ) -> None:
        super().__init__(key)
        if analyzer is None:
            engine = NoOpNlpEngine(models=[{"lang_code": language, "model_name": "no_op"}])
            analyzer = AnalyzerEngine(nlp_engine=engine, supported_languages=[language])
        self.analyzer = analyzer
        self.entities = None if entities is None else list(entities)
        self.language = language
        self.score_threshold = score_threshold

    def find(self, text: str) -> list[Finding]:
        results = self.analyzer.analyze(
            text=text, language=self.language, entities=self.entities, score_threshold=self.score_threshold
        )
        return [Finding(result.start, result.end, result.entity_type.lower()) for result in results]
