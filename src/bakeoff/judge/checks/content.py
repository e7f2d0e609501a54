"""What clients read: a finished reply with an empty ``content`` and its answer only in
``reasoning_content`` is ``answer_in_reasoning`` unless the deployment is meant to think."""

from __future__ import annotations

from bakeoff.judge.checks import Evidence, Finding
from bakeoff.judge.probeset import prompt_texts


def check(ev: Evidence) -> Finding | None:
    """``answer_in_reasoning``: a reply that ended on its own (not cut by ``max_tokens``) with an
    empty ``content`` and its answer only in ``reasoning_content``. Every OpenAI client reads
    ``content``, so it got "" — whatever the thought says. Accepted only where the spec says the
    deployment is meant to think (``[server] thinking = "on"``: the caller reads the reasoning
    field); for the baseline too (no baseline can excuse what clients do not see)."""
    collected, values = ev.collected, ev.values
    mode_asked = ((collected.get("info") or {}).get("thinking") or {}).get("mode", "auto")
    if mode_asked == "on":
        return None
    texts = prompt_texts(collected["prompts"])
    hidden = [(mode, pid, r) for mode, items in collected["results"].items() for pid, r in items.items()
              if r.ok and r.from_reasoning and not r.cut_while_thinking]
    if not hidden:
        return None
    mode, pid, r = hidden[0]
    values["answers_only_in_reasoning"] = len(hidden)
    evidence = [f"{m} / prompt {p}: content {''!r}, reasoning_content {x.reasoning[:100]!r} (finish_reason {x.finish_reason})"
                for m, p, x in hidden[:4]]
    evidence.append(f"prompt: {texts.get(pid.split('#')[0], '(generated prompt)')[:100]!r}")
    return Finding(mode, "answer_in_reasoning",
            f"{len(hidden)} replies ended with an empty content and their answer only in reasoning_content "
            f"(e.g. {mode} / prompt {pid}: {r.reasoning[:80]!r}); a client reading content gets \"\". "
            f"server.thinking = {mode_asked!r}: set it to 'on' if the deployment is meant to answer in its reasoning, "
            "else fix the reasoning parser / chat template", evidence)
