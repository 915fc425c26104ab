#!/usr/bin/env python3
"""Writes train.jsonl and test.jsonl: grade-school word problems in GSM8K's format.

These are NOT GSM8K's problems (the dataset is not downloaded here): this
script generates them from a few templates (shopping, ages, rates, sharing,
savings), with the answer written the way GSM8K writes it: reasoning lines
with `<<a*b=c>>` calculator annotations, then a final `#### N` line. They
exercise cac-run's `gsm8k(..)` task and a BPE tokenizer on realistic text
(smoke.cac here). Deterministic: the files in the repository are this
script's output (`python3 make_sample.py` in this folder rewrites them).
"""
import json
import random

NAMES = ["Ali", "Maya", "Tom", "Priya", "Lena", "Omar", "Sara", "Ken",
         "Nina", "Jack", "Rosa", "Ivan"]
ITEMS = [("apple", "apples"), ("pencil", "pencils"), ("notebook", "notebooks"),
         ("cupcake", "cupcakes"), ("sticker", "stickers"), ("marble", "marbles")]


def calc(a, op, b):
    """One calculator step: the annotation GSM8K writes and its value."""
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
    if op == "/":
        assert a % b == 0, (a, b)
    return f"{a}{op}{b}={value}", value


def shopping(rng):
    name = rng.choice(NAMES)
    _, many = rng.choice(ITEMS)
    count, price = rng.randint(3, 12), rng.randint(2, 9)
    s1, cost = calc(count, "*", price)
    paid = next(bill for bill in (20, 50, 100, 200) if bill > cost)
    s2, change = calc(paid, "-", cost)
    question = (f"{name} buys {count} {many} for ${price} each and pays with "
                f"a ${paid} bill. How much change does {name} get back?")
    steps = [f"The {many} cost {count} * ${price} = $<<{s1}>>{cost}.",
             f"The change is ${paid} - ${cost} = $<<{s2}>>{change}."]
    return question, steps, change


def ages(rng):
    a, b = rng.sample(NAMES, 2)
    age_b = rng.randint(4, 15)
    times = rng.randint(2, 4)
    years = rng.randint(2, 10)
    s1, age_a = calc(times, "*", age_b)
    s2, later = calc(age_a, "+", years)
    question = (f"{a} is {times} times as old as {b}. {b} is {age_b} years "
                f"old. How old will {a} be in {years} years?")
    steps = [f"{a} is {times} * {age_b} = <<{s1}>>{age_a} years old now.",
             f"In {years} years {a} will be {age_a} + {years} = "
             f"<<{s2}>>{later} years old."]
    return question, steps, later


def rates(rng):
    name = rng.choice(NAMES)
    speed = rng.randint(3, 15)
    hours = rng.randint(2, 6)
    extra = rng.randint(5, 30)
    s1, dist = calc(speed, "*", hours)
    s2, total = calc(dist, "+", extra)
    question = (f"{name} rides a bike at {speed} miles per hour for {hours} "
                f"hours, then walks {extra} more miles. How many miles does "
                f"{name} travel in all?")
    steps = [f"Riding, {name} covers {speed} * {hours} = <<{s1}>>{dist} miles.",
             f"In all that is {dist} + {extra} = <<{s2}>>{total} miles."]
    return question, steps, total


def sharing(rng):
    name = rng.choice(NAMES)
    _, many = rng.choice(ITEMS)
    friends = rng.randint(2, 6)
    each = rng.randint(3, 9)
    kept = rng.randint(1, 10)
    s1, shared = calc(friends, "*", each)
    s2, total = calc(shared, "+", kept)
    question = (f"{name} gives {each} {many} to each of {friends} friends and "
                f"keeps {kept} {many}. How many {many} did {name} have at "
                f"first?")
    steps = [f"The friends get {friends} * {each} = <<{s1}>>{shared} {many}.",
             f"{name} had {shared} + {kept} = <<{s2}>>{total} {many}."]
    return question, steps, total


def savings(rng):
    name = rng.choice(NAMES)
    weekly = rng.randint(4, 20)
    weeks = rng.randint(3, 10)
    parts = rng.choice([2, 3, 4])
    s1, saved = calc(weekly, "*", weeks)
    # What is left divides evenly into the jars: GSM8K's answers are integers.
    left = saved - rng.randint(1, saved // 2)
    left -= left % parts
    spent = saved - left
    s2, left = calc(saved, "-", spent)
    s3, share = calc(left, "/", parts)
    question = (f"{name} saves ${weekly} a week for {weeks} weeks, spends "
                f"${spent} on a game, and splits the rest equally into "
                f"{parts} jars. How many dollars go into each jar?")
    steps = [f"{name} saves {weekly} * {weeks} = <<{s1}>>{saved} dollars.",
             f"After the game {saved} - {spent} = <<{s2}>>{left} "
             f"dollars are left.",
             f"Each jar gets {left} / {parts} = <<{s3}>>{share} dollars."]
    return question, steps, share


TEMPLATES = [shopping, ages, rates, sharing, savings]


def problems(rng, n, taken):
    out = []
    while len(out) < n:
        template = TEMPLATES[len(out) % len(TEMPLATES)]
        question, steps, answer = template(rng)
        if question in taken:
            continue
        taken.add(question)
        out.append({"question": question,
                    "answer": "\n".join(steps) + f"\n#### {answer}"})
    return out


def write(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def main():
    rng = random.Random(8)
    taken = set()
    write("train.jsonl", problems(rng, 64, taken))
    write("test.jsonl", problems(rng, 16, taken))


if __name__ == "__main__":
    main()
