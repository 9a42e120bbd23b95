"""A crafted chat for the memory systems' tests: four dated sessions, each one fact among filler
(session 3: the user's sister Dana moved to Lisbon, message 10), and a question about it."""

from __future__ import annotations

from schemas.records import ChatMessage, ChatSlice, Question, Session

FILLER = (
    "We talked about the weather, the news of the week and what to cook for dinner tonight, "
    "without anything worth remembering. "
)


def _messages(start: int, texts: list[str]) -> list[ChatMessage]:
    return [
        ChatMessage(id=start + i, role="assistant" if i % 2 else "user", content=text)
        for i, text in enumerate(texts)
    ]


def crafted_chat() -> ChatSlice:
    """Four sessions; one fact per session, among filler; session 3 holds Dana's move."""
    facts = [
        "I adopted a grey cat named Pixel from the shelter.",
        "My brother Tomas started a pottery class on Thursdays.",
        "My sister Dana moved to Lisbon for her new job at the observatory.",
        "I signed the lease for the Riverside apartment on May 3.",
    ]
    sessions = []
    for number, fact in enumerate(facts, start=1):
        texts = [FILLER * 3, FILLER * 2, fact, "That is good news, thank you for telling me."]
        sessions.append(
            Session(
                number=number,
                date=f"March-{number}-2024",
                date_iso=f"2024-03-0{number}",
                messages=_messages((number - 1) * 4, texts),
            )
        )
    return ChatSlice(conversation_id="9", sessions=sessions)


def question(text: str, ability: str = "information_extraction", index: int = 0) -> Question:
    return Question(
        id=f"conv9:{ability}:{index}",
        conversation_id="9",
        ability=ability,  # type: ignore[arg-type]
        index=index,
        question=text,
    )


DANA = question("Which city did my sister Dana move to for her job?")
