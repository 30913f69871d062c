"""The demo world's code-generated chat corpus, its special tokens and chat template, and its encoding.

Two domains: "kitchen" (recipes, cooking times, substitutions, travel weather: the draft's training domain) and
"nature" (animals, planets, sports: other topics, other phrasing, for held-out prompts). Facts are fixed per
subject (derived from the seed), phrasing and subjects vary, so a tiny LM becomes fluent and a real gap exists.
``conversations("kitchen", 100, seed=0)`` -> SpecForge-style records ``{"id", "domain", "conversations": [...]}``;
``encode_with_mask(tokenizer, record)``: its ids and loss mask. The BPE tokenizer itself is trained by the builder
(``eagle3demo.tokenizer``) and shipped with the target.
"""
from __future__ import annotations

import random
import re

DOMAINS = ("kitchen", "nature")
BOS, EOT, PAD = "<|begin|>", "<|end|>", "<|pad|>"
USER, ASSISTANT, SYSTEM = "<|user|>", "<|assistant|>", "<|system|>"
SPECIAL_TOKENS = [PAD, BOS, EOT, USER, ASSISTANT, SYSTEM]        # ids 0..5 in this order (pad id 0, as SpecForge)
# Jinja chat template stored in tokenizer_config.json; assistant span = content + <|end|> (loss_mask 1).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}<|system|>{{ m['content'] }}<|end|>"
    "{% elif m['role'] == 'user' %}<|user|>{{ m['content'] }}<|end|>"
    "{% elif m['role'] == 'assistant' %}<|assistant|>{{ m['content'] }}<|end|>{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# SpecForge's parser rule: assistant header, then everything up to and including the end-of-turn token.
_ASSISTANT_SPAN = re.compile(re.escape(ASSISTANT) + r"([\s\S]*?(?:" + re.escape(EOT) + "|$))")

_SYLLABLES = ("ka", "lo", "mi", "ra", "ten", "so", "vi", "ul", "ber", "na", "de", "jo", "mar", "el", "is", "ton",
              "fa", "ri", "go", "sha")

# ---- kitchen domain (the draft's training domain) ----
_DISHES = {
    "pancakes": ("flour", "milk", "eggs"), "tomato soup": ("tomatoes", "onion", "garlic"),
    "fried rice": ("rice", "eggs", "peas"), "banana bread": ("bananas", "flour", "butter"),
    "omelette": ("eggs", "cheese", "spinach"), "lentil stew": ("lentils", "carrots", "onion"),
    "apple pie": ("apples", "flour", "sugar"), "guacamole": ("avocados", "lime", "onion"),
    "mushroom risotto": ("rice", "mushrooms", "broth"), "chicken curry": ("chicken", "curry paste", "coconut milk"),
    "pasta salad": ("pasta", "olives", "tomatoes"), "vegetable soup": ("carrots", "celery", "potatoes"),
    "french toast": ("bread", "eggs", "cinnamon"), "hummus": ("chickpeas", "tahini", "lemon"),
    "potato gratin": ("potatoes", "cream", "cheese"), "fish tacos": ("fish", "tortillas", "cabbage"),
    "pumpkin soup": ("pumpkin", "ginger", "cream"), "beef chili": ("beef", "beans", "chili"),
    "carrot cake": ("carrots", "flour", "walnuts"), "greek salad": ("cucumber", "feta", "olives"),
    "shrimp pasta": ("shrimp", "pasta", "garlic"), "porridge": ("oats", "milk", "honey"),
    "mashed potatoes": ("potatoes", "butter", "milk"), "veggie burger": ("beans", "oats", "onion"),
}
_FOODS = ("potatoes", "rice", "chicken", "salmon", "broccoli", "eggs", "carrots", "pasta", "beef", "tofu",
          "green beans", "sweet potatoes", "mushrooms", "shrimp", "zucchini", "corn")
_METHODS = ("boil", "bake", "roast", "steam", "fry", "grill")
_SUBS = {"butter": "olive oil", "eggs": "mashed banana", "milk": "oat milk", "sugar": "honey", "cream": "yogurt",
         "flour": "ground oats", "lemon": "lime", "rice": "quinoa", "beef": "lentils", "cheese": "nutritional yeast",
         "breadcrumbs": "crushed crackers", "buttermilk": "milk with lemon", "honey": "maple syrup",
         "garlic": "garlic powder", "wine": "broth", "soy sauce": "salt", "pasta": "zucchini noodles"}
_TIPS = ("stir it in slowly", "taste as you go", "add it at the end", "mix it well first", "use a little less")
_CITIES = {"Lisbon": 17, "Oslo": 6, "Cairo": 22, "Tokyo": 15, "Denver": 10, "Sydney": 18, "Madrid": 15,
           "Toronto": 8, "Nairobi": 19, "Dublin": 10, "Rome": 16, "Mumbai": 27, "Helsinki": 5, "Lima": 19,
           "Seoul": 12, "Boston": 11, "Vienna": 10, "Bangkok": 28}
_SOUTH = {"Sydney", "Lima", "Nairobi"}
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_HEAT = ("low", "medium", "high")
_SERVE = ("warm with bread", "with a fresh salad", "right away", "with a spoon of yogurt", "with rice")
_PREP = ("mix", "chop", "whisk", "slice", "stir", "mash")

# ---- nature domain (shifted: other topics and phrasing) ----
_ANIMALS = {"otter": ("mammal", "rivers", "fish", 14), "falcon": ("bird", "cliffs", "small birds", 2),
            "gecko": ("reptile", "warm forests", "insects", 1), "walrus": ("mammal", "arctic coasts", "clams", 1500),
            "toucan": ("bird", "rainforests", "fruit", 1), "python": ("reptile", "jungles", "rodents", 90),
            "salamander": ("amphibian", "damp woods", "worms", 1), "bison": ("mammal", "grasslands", "grass", 900),
            "penguin": ("bird", "icy shores", "krill", 40), "octopus": ("mollusk", "reefs", "crabs", 15),
            "koala": ("marsupial", "eucalyptus forests", "leaves", 12), "heron": ("bird", "wetlands", "frogs", 3)}
_PLANETS = {"Mercury": (0, 88), "Venus": (0, 225), "Mars": (2, 687), "Jupiter": (95, 4333), "Saturn": (146, 10759),
            "Uranus": (28, 30687), "Neptune": (16, 60190)}
_SPORTS = {"volleyball": (6, "court"), "rugby": (15, "pitch"), "hockey": (6, "rink"), "cricket": (11, "oval"),
           "basketball": (5, "court"), "handball": (7, "court"), "baseball": (9, "diamond"), "polo": (4, "field")}


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _fact_rng(seed: int, subject: str) -> random.Random:
    return random.Random(f"{seed}:{subject}")             # facts fixed per subject, whatever the sample


def _kitchen_turn(rng: random.Random, seed: int) -> tuple[str, str, str]:
    """One (user, assistant, follow-up subject) exchange of the kitchen domain."""
    kind = rng.choice(("recipe", "recipe", "time", "swap", "weather"))
    if kind == "recipe":
        dish = rng.choice(sorted(_DISHES))
        a, b, c = _DISHES[dish]
        f = _fact_rng(seed, dish)
        mins, heat, prep, serve = f.randrange(10, 61, 5), f.choice(_HEAT), f.choice(_PREP), f.choice(_SERVE)
        q = rng.choice((f"How do I make {dish}?", f"Can you give me a recipe for {dish}?",
                        f"What do I need for {dish}?", f"I want to cook {dish} tonight. How?"))
        ans = rng.choice((
            f"To make {dish}, you need {a}, {b} and {c}. First, {prep} the {a} with the {b}. "
            f"Then add the {c} and cook for {mins} minutes on {heat} heat. Serve it {serve}.",
            f"For {dish} you need {a}, {b} and {c}. {prep.capitalize()} the {a} and the {b} together, "
            f"add the {c}, then cook for {mins} minutes on {heat} heat. Serve it {serve}."))
        return q, ans, dish
    if kind == "time":
        food, method = rng.choice(_FOODS), rng.choice(_METHODS)
        f = _fact_rng(seed, f"{method} {food}")
        mins, temp = f.randrange(5, 46), f.choice((160, 180, 200, 220))
        q = rng.choice((f"How long should I {method} {food}?", f"How many minutes do I {method} {food}?"))
        where = f"in the oven at {temp} degrees" if method in ("bake", "roast") else f"on {f.choice(_HEAT)} heat"
        ans = (f"{method.capitalize()} the {food} for about {mins} minutes {where}. "
               f"Check that the {food} is tender before you serve it.")
        return q, ans, food
    if kind == "swap":
        ing = rng.choice(sorted(_SUBS))
        tip = _fact_rng(seed, ing).choice(_TIPS)
        q = rng.choice((f"What can I use instead of {ing}?", f"I have no {ing}. What can I use?"))
        ans = f"You can use {_SUBS[ing]} instead of {ing}. Use the same amount, and {tip}."
        return q, ans, ing
    city, month = rng.choice(sorted(_CITIES)), rng.randrange(12)
    season = month if city not in _SOUTH else (month + 6) % 12
    temp = _CITIES[city] + round(8 * (1 - abs(season - 6.5) / 3.25)) - 4
    sky = _fact_rng(seed, f"{city}{month}").choice(("sunny", "rainy", "cloudy", "windy", "mild"))
    q = rng.choice((f"What is the weather like in {city} in {_MONTHS[month]}?",
                    f"I am going to {city} in {_MONTHS[month]}. What weather should I expect?"))
    pack = "a warm coat" if temp < 10 else ("a light jacket" if temp < 20 else "light clothes")
    ans = (f"In {_MONTHS[month]}, {city} is usually {sky} with temperatures around {temp} degrees. "
           f"Pack {pack} for your trip.")
    return q, ans, city


def _nature_turn(rng: random.Random, seed: int) -> tuple[str, str, str]:
    """One exchange of the shifted nature domain: other topics; half the answers reuse kitchen-style frames
    ("you need ..., First, ... Check that ... before you ..."), half use their own phrasing."""
    kind = rng.choice(("animal", "planet", "sport"))
    own_style = rng.random() < 0.5
    if kind == "animal":
        animal = rng.choice(sorted(_ANIMALS))
        cls, home, food, kg = _ANIMALS[animal]
        q = rng.choice((f"Tell me about the {animal}.", f"Could you describe the {animal} briefly?"))
        ans = (f"Sure. The {animal} is a {cls} found in {home}. It mostly eats {food}, "
               f"and an adult may weigh up to {kg} kilograms." if own_style else
               f"To see the {animal}, you need patience, a map and a warm coat. First, go to the {home}. "
               f"Then wait for about 30 minutes, and use the {food} as a sign. Check that the {animal} is calm "
               f"before you get close.")
        return q, ans, animal
    if kind == "planet":
        planet = rng.choice(sorted(_PLANETS))
        moons, days = _PLANETS[planet]
        q = rng.choice((f"Explain a few facts about {planet}.", f"What should I know about {planet}?"))
        ans = (f"Sure. {planet} has {moons} known moons, and one orbit around the Sun takes about {days} "
               f"Earth days. It is easy to spot with a small telescope." if own_style else
               f"To watch {planet}, you need a small telescope and a clear night. {planet} has {moons} moons, "
               f"and one orbit takes about {days} days. Check that the sky is dark before you start.")
        return q, ans, planet
    sport = rng.choice(sorted(_SPORTS))
    players, ground = _SPORTS[sport]
    q = rng.choice((f"How is {sport} played?", f"Explain the basic rules of {sport}."))
    ans = (f"Sure. In {sport}, each team puts {players} players on the {ground}. "
           f"Points are scored by getting the ball past the other team, and the referee keeps time."
           if own_style else
           f"For {sport} you need {players} players on each team and a {ground}. First, the teams take "
           f"their places. Then they play for about {_fact_rng(seed, sport).randrange(20, 91, 10)} minutes. "
           f"Check that everyone is ready before you start.")
    return q, ans, sport


def conversations(domain: str, n: int, seed: int, split: str = "train") -> list[dict]:
    """`n` deterministic chat records of `domain` (1-2 user/assistant exchanges, sometimes with a name).

    The facts (ingredients, minutes, weights...) depend on `seed` only; `split` draws other conversations.
    """
    if domain not in DOMAINS:
        raise ValueError(f"demo corpus domain: expected one of {DOMAINS}, found {domain!r}")
    rng = random.Random(f"{seed}:{domain}:{split}")
    turn = _kitchen_turn if domain == "kitchen" else _nature_turn
    out = []
    for i in range(n):
        q, ans, subject = turn(rng, seed)
        if rng.random() < 0.3:                              # copying a name: an induction pattern
            name = _name(rng)
            q, ans = f"Hi, I am {name}. {q}", f"Hello {name}! {ans}"
        msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": ans}]
        if rng.random() < 0.35:
            q2, ans2, _ = turn(rng, seed)
            if rng.random() < 0.5:
                q2, ans2 = "Thanks, that helps!", f"You are welcome. Enjoy the {subject}!"
            msgs += [{"role": "user", "content": q2}, {"role": "assistant", "content": ans2}]
        out.append({"id": f"{domain}-{split}-{i:05d}", "domain": domain, "conversations": msgs})
    return out


def assistant_char_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of assistant content + end-of-turn token in a rendered chat (SpecForge's regex rule)."""
    return [m.span(1) for m in _ASSISTANT_SPAN.finditer(text)]


def encode_with_mask(hf_tokenizer, record: dict) -> tuple[list[int], list[int]]:
    """(input_ids, loss_mask) of one record through the chat template; mask 1 on assistant content + <|end|>."""
    text = hf_tokenizer.apply_chat_template(record["conversations"], tokenize=False)
    enc = hf_tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = assistant_char_spans(text)
    mask = [int(any(s <= a and b <= e for s, e in spans)) for a, b in enc["offset_mapping"]]
    return list(enc["input_ids"]), mask
