"""The 14 scenario templates of the synthetic TicToc data (a data table): tools, entities, results, follow-ups.

One `Template` per Table 6 scenario, 7 in the train split and 7 in the test split (Appendix D.1), spanning the
three sensitivities. Each says how to ask about an entity, makes a seeded tool result, summarises it, and offers the
follow-up questions (with their direct answers) that the final user turn may ask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Callable, Mapping

import numpy as np

# Every tool states how fast its data changes, one phrase per sensitivity, appended to its description (real APIs
# document this: "real-time quotes", "updated annually"). The paper's annotators knew it from the world; a
# randomly initialised model cannot, so without it no model could tell a held-out scenario's sensitivity.
# The phrases name the unit of the rule's threshold scale (30 s, 30 min, 7 days): "call again once more time has
# passed than the data takes to change".
FRESHNESS: Mapping[str, str] = MappingProxyType(
    {
        "high": "Data updates every second.",
        "medium": "Data updates every hour.",
        "low": "Data updates every week.",
    }
)


@dataclass(frozen=True)
class Context:
    """What a follow-up may refer to: the target entity's latest result and, if any, another one."""

    entity: str
    result: dict
    other: str | None = None
    other_result: dict | None = None


# A follow-up form returns (question, direct answer), or None when it does not apply
# (a comparison needs a second retrieved entity).
FollowUp = Callable[[Context], "tuple[str, str] | None"]


@dataclass(frozen=True)
class Template:
    """One scenario (Table 6 name) with its tool, entities, result maker and follow-up forms."""

    slug: str
    scenario: str
    sensitivity: str  # Table 6
    split: str  # Appendix D.1: "train" | "test"
    system_prompt: str
    tool_name: str
    tool_description: str
    arg_name: str
    arg_description: str
    entities: tuple[str, ...]
    ask_forms: tuple[str, ...]  # "{e}" = entity
    make_result: Callable[[str, np.random.Generator, datetime], dict]
    summarize: Callable[[str, dict], str]
    followups: tuple[FollowUp, ...]
    article: str = ""  # "the " where the entity needs it: "What about the Hyatt Regency Seattle?"

    @property
    def tool_schema(self) -> dict:
        return {
            "type": "function",
            "function": {
                "name": self.tool_name,
                "description": f"{self.tool_description} {FRESHNESS[self.sensitivity]}",
                "parameters": {
                    "type": "object",
                    "properties": {self.arg_name: {"type": "string", "description": self.arg_description}},
                    "required": [self.arg_name],
                },
            },
        }


def _usd(x: float) -> str:
    return f"${x:,.2f}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _jiggle(rng: np.random.Generator, base: float, rel: float) -> float:
    return base * (1.0 + rel * float(rng.normal()))


def _compare(a: str, va: float, b: str, vb: float, higher_wins: bool, what: str, fmt: Callable[[float], str]) -> str:
    """'A has the higher X (va), versus vb for B.' with an explicit tie case."""
    if va == vb:
        return _cap(f"{a} and {b} are tied on {what} at {fmt(va)}.")
    a_wins = (va > vb) == higher_wins
    w, vw, l, vl = (a, va, b, vb) if a_wins else (b, vb, a, va)
    return _cap(f"{w} has the {'higher' if higher_wins else 'lower'} {what} at {fmt(vw)}, versus {fmt(vl)} for {l}.")


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


# --- Stock Market Order Book (high, test)

_STOCKS = {"AAPL": 189.5, "MSFT": 415.2, "NVDA": 121.8, "TSLA": 242.6, "AMZN": 182.3}


def _order_book(e: str, rng: np.random.Generator, _: datetime) -> dict:
    mid = round(_jiggle(rng, _STOCKS[e], 0.01), 2)
    half = 0.01 * int(rng.integers(1, 5))
    bids = [{"price": round(mid - half - 0.01 * k, 2), "shares": 100 * int(rng.integers(1, 10))} for k in range(3)]
    asks = [{"price": round(mid + half + 0.01 * k, 2), "shares": 100 * int(rng.integers(1, 10))} for k in range(3)]
    return {"ticker": e, "bids": bids, "asks": asks, "last_trade_price": mid}


def _order_book_text(e: str, r: dict) -> str:
    b, a = r["bids"][0], r["asks"][0]
    return (
        f"The order book for {e} shows a best bid of {_usd(b['price'])} for {b['shares']} shares and a best ask "
        f"of {_usd(a['price'])} for {a['shares']} shares. The last trade printed at {_usd(r['last_trade_price'])}."
    )


def _spread(r: dict) -> float:
    return round(r["asks"][0]["price"] - r["bids"][0]["price"], 2)


STOCK_ORDER_BOOK = Template(
    slug="stock_market_order_book",
    scenario="Stock Market Order Book",
    sensitivity="high",
    split="test",
    system_prompt="You are a helpful trading assistant that retrieves real-time order book data for listed stocks.",
    tool_name="get_order_book",
    tool_description=(
        "Returns the current top levels of the buy and sell order book and the last trade price for a stock."
    ),
    arg_name="ticker",
    arg_description="The stock ticker symbol, e.g. 'AAPL'.",
    entities=tuple(_STOCKS),
    ask_forms=("Can you pull up the order book for {e}?", "What do the bids and asks for {e} look like?"),
    make_result=_order_book,
    summarize=_order_book_text,
    followups=(
        lambda c: (
            f"What's the best ask on {c.entity}?",
            f"The best ask for {c.entity} is {_usd(c.result['asks'][0]['price'])} for "
            f"{c.result['asks'][0]['shares']} shares.",
        ),
        lambda c: (
            f"If I buy 100 shares of {c.entity} at the best ask, how much will that cost?",
            f"At the best ask of {_usd(c.result['asks'][0]['price'])}, 100 shares of {c.entity} would cost "
            f"{_usd(100 * c.result['asks'][0]['price'])}.",
        ),
        lambda c: (
            None
            if c.other is None
            else (
                f"Which has the tighter bid-ask spread, {c.entity} or {c.other}?",
                _compare(c.entity, _spread(c.result), c.other, _spread(c.other_result), False, "bid-ask spread", _usd),
            )
        ),
    ),
)

# --- Live Sports Score Tracker (high, test)

_GAMES = ("Lakers vs Celtics", "Warriors vs Nuggets", "Knicks vs Heat", "Bucks vs Suns", "Mavericks vs Clippers")


def _live_score(e: str, rng: np.random.Generator, _: datetime) -> dict:
    home, away = e.split(" vs ")
    q = int(rng.integers(1, 5))
    base = 25 * q
    return {
        "game": e,
        "home_team": home,
        "away_team": away,
        "home_score": base + int(rng.integers(-8, 9)),
        "away_score": base + int(rng.integers(-8, 9)),
        "period": f"{_ordinal(q)} quarter",
        "clock": f"{int(rng.integers(0, 12)):02d}:{int(rng.integers(0, 60)):02d}",
        "status": "in progress",
    }


def _live_score_text(e: str, r: dict) -> str:
    h, a, hs, as_ = r["home_team"], r["away_team"], r["home_score"], r["away_score"]
    when = f"with {r['clock']} left in the {r['period']}"
    if hs == as_:
        return f"The {h} and the {a} are tied {hs}-{as_} {when}."
    lead, trail = (h, a) if hs > as_ else (a, h)
    return f"The {lead} lead the {trail} {max(hs, as_)}-{min(hs, as_)} {when}."


def _margin_text(c: Context) -> str:
    r = c.result
    d = r["home_score"] - r["away_score"]
    if d == 0:
        return f"The {r['home_team']} are level with the {r['away_team']} at {r['home_score']}-{r['away_score']}."
    word = "ahead" if d > 0 else "behind"
    return f"The {r['home_team']} are {word} by {abs(d)} points ({r['home_score']}-{r['away_score']})."


LIVE_SCORE = Template(
    slug="live_sports_score_tracker",
    scenario="Live Sports Score Tracker",
    sensitivity="high",
    split="test",
    system_prompt="You are a helpful sports assistant that retrieves the current score and status of ongoing games.",
    tool_name="get_live_score",
    tool_description="Retrieves the current score, period, and game clock of an ongoing basketball game.",
    arg_name="game",
    arg_description="The matchup, e.g. 'Lakers vs Celtics'.",
    entities=_GAMES,
    ask_forms=("What's the score in the {e} game?", "How is the {e} game going?"),
    make_result=_live_score,
    summarize=_live_score_text,
    followups=(
        lambda c: (f"What's the score of {c.entity}?", _live_score_text(c.entity, c.result)),
        lambda c: (f"How many points are the {c.result['home_team']} ahead or behind by?", _margin_text(c)),
        lambda c: (
            None
            if c.other is None
            else (
                f"Which game is closer, {c.entity} or {c.other}?",
                _compare(
                    c.entity,
                    abs(c.result["home_score"] - c.result["away_score"]),
                    c.other,
                    abs(c.other_result["home_score"] - c.other_result["away_score"]),
                    False,
                    "scoring margin",
                    lambda v: f"{int(v)} points",
                ),
            )
        ),
    ),
)

# --- Cryptocurrency Exchange Retrieval (high, train)

_COINS = {
    "BTC": (67000.0, 0.5),
    "ETH": (3400.0, 2.0),
    "SOL": (150.0, 20.0),
    "XRP": (0.55, 1000.0),
    "DOGE": (0.15, 5000.0),
}


def _crypto(e: str, rng: np.random.Generator, _: datetime) -> dict:
    price = _jiggle(rng, _COINS[e][0], 0.03)
    return {
        "symbol": e,
        "price_usd": round(price, 2 if price > 10 else 4),
        "change_24h_pct": round(float(rng.normal(0, 3)), 2),
        "volume_24h_usd": int(_jiggle(rng, 2e9, 0.3)),
    }


def _crypto_price(p: float) -> str:
    return _usd(p) if p > 10 else f"${p:.4f}"


def _crypto_text(e: str, r: dict) -> str:
    ch = r["change_24h_pct"]
    move = f"{'up' if ch >= 0 else 'down'} {abs(ch):.2f}%"
    return f"{e} is trading at {_crypto_price(r['price_usd'])}, {move} over the last 24 hours."


CRYPTO = Template(
    slug="cryptocurrency_exchange_retrieval",
    scenario="Cryptocurrency Exchange Retrieval",
    sensitivity="high",
    split="train",
    system_prompt=(
        "You are a helpful crypto assistant that retrieves live trade prices from a cryptocurrency exchange."
    ),
    tool_name="get_crypto_price",
    tool_description="Gets the latest trade price in USD and the 24-hour change for a cryptocurrency.",
    arg_name="symbol",
    arg_description="The coin symbol, e.g. 'BTC'.",
    entities=tuple(_COINS),
    ask_forms=("What's {e} trading at?", "Can you check the price of {e} for me?"),
    make_result=_crypto,
    summarize=_crypto_text,
    followups=(
        lambda c: (f"What's the price of {c.entity}?", _crypto_text(c.entity, c.result)),
        lambda c: (
            f"How much would {_COINS[c.entity][1]:g} {c.entity} be worth in USD?",
            f"At {_crypto_price(c.result['price_usd'])} per coin, {_COINS[c.entity][1]:g} {c.entity} would be worth "
            f"{_usd(_COINS[c.entity][1] * c.result['price_usd'])}.",
        ),
        lambda c: (
            None
            if c.other is None
            else (
                f"Which has moved more over the last 24 hours, {c.entity} or {c.other}?",
                _compare(
                    c.entity,
                    abs(c.result["change_24h_pct"]),
                    c.other,
                    abs(c.other_result["change_24h_pct"]),
                    True,
                    "24-hour move",
                    lambda v: f"{v:.2f}%",
                ),
            )
        ),
    ),
)

# --- Live Sports Betting Odds Retrieval (high, train)

_MATCHES = (
    "Arsenal vs Chelsea",
    "Real Madrid vs Barcelona",
    "Bayern vs Dortmund",
    "Inter vs Juventus",
    "PSG vs Marseille",
)


def _odds(e: str, rng: np.random.Generator, _: datetime) -> dict:
    hg, ag = int(rng.integers(0, 3)), int(rng.integers(0, 3))
    tilt = 0.6 * (hg - ag) + float(rng.normal(0, 0.4))
    home = round(max(1.05, 2.6 * math.exp(-tilt)), 2)
    away = round(max(1.05, 2.9 * math.exp(tilt)), 2)
    return {
        "match": e,
        "minute": int(rng.integers(5, 90)),
        "score": f"{hg}-{ag}",
        "odds": {"home": home, "draw": round(float(rng.uniform(2.8, 4.5)), 2), "away": away},
    }


def _odds_text(e: str, r: dict) -> str:
    home, away = e.split(" vs ")
    o = r["odds"]
    return (
        f"In the {_ordinal(r['minute'])} minute of {e} (score {r['score']}), the live odds are {o['home']:.2f} "
        f"for {home}, {o['draw']:.2f} for the draw, and {o['away']:.2f} for {away}."
    )


BETTING = Template(
    slug="live_sports_betting_odds_retrieval",
    scenario="Live Sports Betting Odds Retrieval",
    sensitivity="high",
    split="train",
    system_prompt=(
        "You are a helpful betting assistant that retrieves live decimal odds for in-progress football matches."
    ),
    tool_name="get_live_odds",
    tool_description=(
        "Provides the current decimal odds (home, draw, away), score and minute for an in-progress match."
    ),
    arg_name="match",
    arg_description="The match, e.g. 'Arsenal vs Chelsea'.",
    entities=_MATCHES,
    ask_forms=("What are the live odds for {e}?", "Can you get me the odds on {e}?"),
    make_result=_odds,
    summarize=_odds_text,
    followups=(
        lambda c: (
            f"What are the odds on {c.entity.split(' vs ')[0]} winning?",
            f"The live odds on {c.entity.split(' vs ')[0]} winning are {c.result['odds']['home']:.2f}.",
        ),
        lambda c: (
            f"If I put $50 on {c.entity.split(' vs ')[0]} to win, what would I get back?",
            f"At odds of {c.result['odds']['home']:.2f}, a $50.00 bet on {c.entity.split(' vs ')[0]} would return "
            f"{_usd(50 * c.result['odds']['home'])} if they win.",
        ),
        lambda c: (
            None
            if c.other is None
            else (
                f"In which match is the home side the bigger favorite, {c.entity} or {c.other}?",
                _compare(
                    c.entity,
                    c.result["odds"]["home"],
                    c.other,
                    c.other_result["odds"]["home"],
                    False,
                    "home-win odds",
                    lambda v: f"{v:.2f}",
                ),
            )
        ),
    ),
)

# --- E-commerce Product Stock Checker (high, train)

_PRODUCTS = {
    "Sony WH-1000XM5": 349.99,
    "Nintendo Switch OLED": 349.99,
    "Apple AirPods Pro": 249.0,
    "Samsung 65-inch QLED TV": 999.99,
    "Dyson V15 vacuum": 749.99,
}


def _stock(e: str, rng: np.random.Generator, _: datetime) -> dict:
    left = int(rng.integers(0, 12))
    return {
        "product": e,
        "retailer": "ShopMart",
        "price_usd": round(_jiggle(rng, _PRODUCTS[e], 0.05), 2),
        "in_stock": left > 0,
        "units_left": left,
    }


def _stock_text(e: str, r: dict) -> str:
    if not r["in_stock"]:
        return f"The {e} is listed at {_usd(r['price_usd'])} at {r['retailer']} but is currently out of stock."
    return f"The {e} is {_usd(r['price_usd'])} at {r['retailer']}, with {r['units_left']} units left in stock."


ECOMMERCE = Template(
    slug="ecommerce_product_stock_checker",
    article="the ",
    scenario="E-commerce Product Stock Checker",
    sensitivity="high",
    split="train",
    system_prompt="You are a helpful shopping assistant that checks current prices and inventory for retail products.",
    tool_name="check_product_stock",
    tool_description="Checks the current price and remaining inventory of a product at an online retailer.",
    arg_name="product",
    arg_description="The product name, e.g. 'Nintendo Switch OLED'.",
    entities=tuple(_PRODUCTS),
    ask_forms=("Is the {e} in stock, and how much is it?", "Can you check price and availability for the {e}?"),
    make_result=_stock,
    summarize=_stock_text,
    followups=(
        lambda c: (
            f"Is the {c.entity} available?",
            (
                f"Yes, {c.result['retailer']} has {c.result['units_left']} units of the {c.entity} left at "
                f"{_usd(c.result['price_usd'])}."
            )
            if c.result["in_stock"]
            else f"No, the {c.entity} is out of stock at {c.result['retailer']}.",
        ),
        lambda c: (
            f"How much would 2 of the {c.entity} cost in total?",
            f"At {_usd(c.result['price_usd'])} each, 2 of the {c.entity} would cost "
            f"{_usd(2 * c.result['price_usd'])}.",
        ),
        lambda c: (
            None
            if c.other is None
            else (
                f"Which is cheaper, the {c.entity} or the {c.other}?",
                _compare(
                    f"the {c.entity}",
                    c.result["price_usd"],
                    f"the {c.other}",
                    c.other_result["price_usd"],
                    False,
                    "price",
                    _usd,
                ),
            )
        ),
    ),
)

# --- Tide Height Tracker (medium, test)

_STATIONS = ("Santa Monica Pier", "Boston Harbor", "Seattle Elliott Bay", "Key West", "San Diego Bay")


def _tide(e: str, rng: np.random.Generator, _: datetime) -> dict:
    return {
        "station": e,
        "water_level_m": round(float(rng.uniform(0.2, 3.0)), 2),
        "trend": "rising" if rng.random() < 0.5 else "falling",
        "datum": "MLLW",
    }


def _tide_text(e: str, r: dict) -> str:
    return f"The water level at {e} is {r['water_level_m']:.2f} meters above {r['datum']} and {r['trend']}."


def _clearance(c: Context) -> tuple[str, str]:
    lvl = c.result["water_level_m"]
    diff = round(abs(lvl - 1.5), 2)
    if lvl >= 1.5:
        ans = f"Yes, the water at {c.entity} is {lvl:.2f} meters, {diff:.2f} meters above the 1.5 meters you need."
    else:
        ans = f"No, the water at {c.entity} is {lvl:.2f} meters, {diff:.2f} meters short of the 1.5 meters you need."
    return f"My boat needs at least 1.5 meters of water. Is there enough at {c.entity}?", ans


TIDE = Template(
    slug="tide_height_tracker",
    scenario="Tide Height Tracker",
    sensitivity="medium",
    split="test",
    system_prompt="You are a helpful marine assistant that reports live measured water levels at coastal stations.",
    tool_name="get_tide_level",
    tool_description="Shows the live measured water level and its trend at a coastal tide station.",
    arg_name="station",
    arg_description="The tide station name, e.g. 'Boston Harbor'.",
    entities=_STATIONS,
    ask_forms=("What's the water level at {e}?", "How high is the tide at {e}?"),
    make_result=_tide,
    summarize=_tide_text,
    followups=(
        lambda c: (f"Is the tide at {c.entity} rising or falling?", _tide_text(c.entity, c.result)),
        _clearance,
        lambda c: (
            None
            if c.other is None
            else (
                f"Where is the water higher, {c.entity} or {c.other}?",
                _compare(
                    c.entity,
                    c.result["water_level_m"],
                    c.other,
                    c.other_result["water_level_m"],
                    True,
                    "water level",
                    lambda v: f"{v:.2f} meters",
                ),
            )
        ),
    ),
)

# --- Movie Showtimes Finder (medium, test)

_MOVIES = ("Dune: Part Two", "Inside Out 2", "Oppenheimer", "Deadpool & Wolverine", "The Wild Robot")


def _showtimes(e: str, rng: np.random.Generator, _: datetime) -> dict:
    starts = sorted(rng.choice(np.arange(11, 23), size=3, replace=False).tolist())
    return {
        "movie": e,
        "cinema": "Regal Union Square",
        "showtimes": [
            {"time": f"{h:02d}:{int(rng.choice([0, 15, 30, 45])):02d}", "seats_left": int(rng.integers(0, 80))}
            for h in starts
        ],
    }


def _showtimes_text(e: str, r: dict) -> str:
    parts = [f"{s['time']} ({s['seats_left']} seats left)" for s in r["showtimes"]]
    return f"{e} is showing at {r['cinema']} at {', '.join(parts[:-1])}, and {parts[-1]}."


def _seats(r: dict) -> int:
    return sum(s["seats_left"] for s in r["showtimes"])


MOVIES = Template(
    slug="movie_showtimes_finder",
    scenario="Movie Showtimes Finder",
    sensitivity="medium",
    split="test",
    system_prompt="You are a helpful cinema assistant that retrieves local showtimes and seat availability.",
    tool_name="get_showtimes",
    tool_description="Retrieves this week's showtimes and remaining seats for a movie at the user's local cinema.",
    arg_name="movie",
    arg_description="The movie title, e.g. 'Dune: Part Two'.",
    entities=_MOVIES,
    ask_forms=("When is {e} playing?", "Can you find showtimes for {e}?"),
    make_result=_showtimes,
    summarize=_showtimes_text,
    followups=(
        lambda c: (f"What are the showtimes for {c.entity}?", _showtimes_text(c.entity, c.result)),
        lambda c: (
            f"How many seats are left for the {c.result['showtimes'][-1]['time']} showing of {c.entity}?",
            f"The {c.result['showtimes'][-1]['time']} showing of {c.entity} has "
            f"{c.result['showtimes'][-1]['seats_left']} seats left.",
        ),
        lambda c: (
            None
            if c.other is None
            else (
                f"Which has more seats left across its showings, {c.entity} or {c.other}?",
                _compare(
                    c.entity,
                    _seats(c.result),
                    c.other,
                    _seats(c.other_result),
                    True,
                    "seat count",
                    lambda v: f"{int(v)} seats",
                ),
            )
        ),
    ),
)

# --- Hotel Room Availability & Rates (medium, test)

_HOTELS = {
    "Hilton Garden Inn Midtown": 229.0,
    "Marriott Downtown Chicago": 259.0,
    "Hyatt Regency Seattle": 239.0,
    "The Westin Boston": 279.0,
    "Holiday Inn Express Austin": 149.0,
}


def _hotel(e: str, rng: np.random.Generator, _: datetime) -> dict:
    base = round(_jiggle(rng, _HOTELS[e], 0.1))
    return {
        "hotel": e,
        "rooms": [
            {"room_type": "Standard King", "nightly_rate_usd": float(base), "rooms_left": int(rng.integers(1, 9))},
            {
                "room_type": "Deluxe Double Queen",
                "nightly_rate_usd": float(base + 10 * int(rng.integers(3, 9))),
                "rooms_left": int(rng.integers(1, 6)),
            },
        ],
    }


def _hotel_text(e: str, r: dict) -> str:
    k, q = r["rooms"]
    return (
        f"At the {e}, a {k['room_type']} is {_usd(k['nightly_rate_usd'])} per night ({k['rooms_left']} left) and a "
        f"{q['room_type']} is {_usd(q['nightly_rate_usd'])} per night ({q['rooms_left']} left)."
    )


HOTEL = Template(
    slug="hotel_room_availability_rates",
    article="the ",
    scenario="Hotel Room Availability & Rates",
    sensitivity="medium",
    split="test",
    system_prompt="You are a helpful travel assistant that checks hotel room availability and current nightly rates.",
    tool_name="check_room_availability",
    tool_description="Checks which room types are available at a hotel and their current nightly rates.",
    arg_name="hotel",
    arg_description="The hotel name, e.g. 'Hyatt Regency Seattle'.",
    entities=tuple(_HOTELS),
    ask_forms=("What rooms are available at the {e}?", "Can you check rates at the {e}?"),
    make_result=_hotel,
    summarize=_hotel_text,
    followups=(
        lambda c: (
            f"How much is a Standard King at the {c.entity}?",
            f"A Standard King at the {c.entity} is {_usd(c.result['rooms'][0]['nightly_rate_usd'])} per night, "
            f"with {c.result['rooms'][0]['rooms_left']} left.",
        ),
        lambda c: (
            f"What would 3 nights in the Deluxe Double Queen at the {c.entity} cost?",
            f"At {_usd(c.result['rooms'][1]['nightly_rate_usd'])} per night, 3 nights in the Deluxe Double Queen "
            f"at the {c.entity} would cost {_usd(3 * c.result['rooms'][1]['nightly_rate_usd'])} before taxes.",
        ),
        lambda c: (
            None
            if c.other is None
            else (
                f"Which hotel has the cheaper Standard King, the {c.entity} or the {c.other}?",
                _compare(
                    f"the {c.entity}",
                    c.result["rooms"][0]["nightly_rate_usd"],
                    f"the {c.other}",
                    c.other_result["rooms"][0]["nightly_rate_usd"],
                    False,
                    "Standard King rate",
                    _usd,
                ),
            )
        ),
    ),
)

# --- Weather Forecast Service (medium, train)

_CITIES_WX = {"Seattle": 14.0, "Chicago": 18.0, "Miami": 30.0, "Denver": 20.0, "Boston": 16.0}
_CONDITIONS = ("sunny", "partly cloudy", "overcast", "light rain", "thunderstorms")


def _weather(e: str, rng: np.random.Generator, _: datetime) -> dict:
    high = round(_jiggle(rng, _CITIES_WX[e], 0.2))
    cond = _CONDITIONS[int(rng.integers(0, len(_CONDITIONS)))]
    wet = cond in ("light rain", "thunderstorms")
    return {
        "city": e,
        "tomorrow": {
            "condition": cond,
            "high_c": int(high),
            "low_c": int(high - rng.integers(5, 11)),
            "precipitation_chance_pct": int(rng.integers(55, 95) if wet else rng.integers(0, 35)),
        },
    }


def _weather_text(e: str, r: dict) -> str:
    t = r["tomorrow"]
    return (
        f"Tomorrow's forecast for {e} is {t['condition']}, with a high of {t['high_c']}°C, a low of "
        f"{t['low_c']}°C, and a {t['precipitation_chance_pct']}% chance of precipitation."
    )


def _umbrella(c: Context) -> tuple[str, str]:
    p = c.result["tomorrow"]["precipitation_chance_pct"]
    verdict = "Yes, bring an umbrella" if p >= 50 else "You probably won't need one"
    return (
        f"Will I need an umbrella in {c.entity} tomorrow?",
        f"{verdict}: the forecast for {c.entity} tomorrow shows a {p}% chance of precipitation.",
    )


WEATHER = Template(
    slug="weather_forecast_service",
    scenario="Weather Forecast Service",
    sensitivity="medium",
    split="train",
    system_prompt="You are a helpful weather assistant that fetches the forecast for upcoming days.",
    tool_name="get_weather_forecast",
    tool_description="Fetches tomorrow's weather forecast (condition, temperatures, precipitation chance) for a city.",
    arg_name="city",
    arg_description="The city name, e.g. 'Seattle'.",
    entities=tuple(_CITIES_WX),
    ask_forms=("What's the weather forecast for {e} tomorrow?", "How will the weather be in {e} tomorrow?"),
    make_result=_weather,
    summarize=_weather_text,
    followups=(
        lambda c: (f"What's tomorrow's forecast for {c.entity}?", _weather_text(c.entity, c.result)),
        _umbrella,
        lambda c: (
            None
            if c.other is None
            else (
                f"Which city will be warmer tomorrow, {c.entity} or {c.other}?",
                _compare(
                    c.entity,
                    c.result["tomorrow"]["high_c"],
                    c.other,
                    c.other_result["tomorrow"]["high_c"],
                    True,
                    "forecast high",
                    lambda v: f"{int(v)}°C",
                ),
            )
        ),
    ),
)

# --- Currency Exchange Rate (medium, train)

_FX = {"USD/EUR": 0.92, "USD/JPY": 151.0, "GBP/USD": 1.27, "USD/CAD": 1.36, "EUR/CHF": 0.96}


def _fx(e: str, rng: np.random.Generator, _: datetime) -> dict:
    base, quote = e.split("/")
    return {
        "base": base,
        "quote": quote,
        "rate": round(_jiggle(rng, _FX[e], 0.01), 4),
        "change_today_pct": round(float(rng.normal(0, 0.3)), 2),
    }


def _fx_text(e: str, r: dict) -> str:
    ch = r["change_today_pct"]
    return (
        f"The {e} rate is {r['rate']:.4f}, so 1 {r['base']} buys {r['rate']:.4f} {r['quote']} "
        f"({'up' if ch >= 0 else 'down'} {abs(ch):.2f}% today)."
    )


FX = Template(
    slug="currency_exchange_rate",
    scenario="Currency Exchange Rate",
    sensitivity="medium",
    split="train",
    system_prompt="You are a helpful travel budgeting assistant that provides daily foreign exchange rates.",
    tool_name="get_exchange_rate",
    tool_description="Provides the current exchange rate and today's change for a currency pair.",
    arg_name="currency_pair",
    arg_description="The pair as BASE/QUOTE, e.g. 'USD/EUR'.",
    entities=tuple(_FX),
    ask_forms=("What's the {e} exchange rate?", "Can you check the {e} rate for me?"),
    make_result=_fx,
    summarize=_fx_text,
    followups=(
        lambda c: (f"What's the {c.entity} rate?", _fx_text(c.entity, c.result)),
        lambda c: (
            f"How much {c.result['quote']} would I get for 250 {c.result['base']}?",
            f"At a rate of {c.result['rate']:.4f}, 250 {c.result['base']} would get you "
            f"{250 * c.result['rate']:,.2f} {c.result['quote']}.",
        ),
        lambda c: (
            None
            if c.other is None
            else (
                f"Which pair has moved more today, {c.entity} or {c.other}?",
                _compare(
                    c.entity,
                    abs(c.result["change_today_pct"]),
                    c.other,
                    abs(c.other_result["change_today_pct"]),
                    True,
                    "move today",
                    lambda v: f"{v:.2f}%",
                ),
            )
        ),
    ),
)

# --- Airline Baggage Policy (low, test)

_AIRLINES = ("Delta", "United", "American Airlines", "Alaska Airlines", "JetBlue")


def _baggage(e: str, rng: np.random.Generator, _: datetime) -> dict:
    first = int(rng.choice([30, 35, 40]))
    return {
        "airline": e,
        "carry_on": {"max_dimensions_in": "22 x 14 x 9", "fee_usd": 0},
        "checked_bags": {"first_bag_fee_usd": first, "second_bag_fee_usd": first + 10, "max_weight_lb": 50},
    }


def _baggage_text(e: str, r: dict) -> str:
    cb = r["checked_bags"]
    return (
        f"{e} allows a free carry-on up to {r['carry_on']['max_dimensions_in']} inches. Checked bags cost "
        f"{_usd(cb['first_bag_fee_usd'])} for the first and {_usd(cb['second_bag_fee_usd'])} for the second, "
        f"with a {cb['max_weight_lb']} lb limit per bag."
    )


BAGGAGE = Template(
    slug="airline_baggage_policy",
    scenario="Airline Baggage Policy",
    sensitivity="low",
    split="test",
    system_prompt="You are a helpful airline assistant that retrieves current baggage allowances and fees.",
    tool_name="get_baggage_policy",
    tool_description="Returns the carry-on allowance, checked bag fees, and weight limits of an airline.",
    arg_name="airline",
    arg_description="The airline name, e.g. 'Delta'.",
    entities=_AIRLINES,
    ask_forms=("What's the baggage policy on {e}?", "How much does {e} charge for checked bags?"),
    make_result=_baggage,
    summarize=_baggage_text,
    followups=(
        lambda c: (
            f"What's the weight limit for checked bags on {c.entity}?",
            f"{c.entity} allows up to {c.result['checked_bags']['max_weight_lb']} lb per checked bag.",
        ),
        lambda c: (
            f"How much would I pay to check two bags each way on a round trip with {c.entity}?",
            f"Two bags cost {_usd(c.result['checked_bags']['first_bag_fee_usd'])} + "
            f"{_usd(c.result['checked_bags']['second_bag_fee_usd'])} each way, so "
            f"{_usd(2 * (c.result['checked_bags']['first_bag_fee_usd'] + c.result['checked_bags']['second_bag_fee_usd']))}"  # noqa: E501
            f" for the round trip on {c.entity}.",
        ),
        lambda c: (
            None
            if c.other is None
            else (
                f"Which airline charges less for the first checked bag, {c.entity} or {c.other}?",
                _compare(
                    c.entity,
                    c.result["checked_bags"]["first_bag_fee_usd"],
                    c.other,
                    c.other_result["checked_bags"]["first_bag_fee_usd"],
                    False,
                    "first-bag fee",
                    _usd,
                ),
            )
        ),
    ),
)

# --- City Population Data (low, test)

_CITIES_POP = {
    "Austin": ("Texas", 974_000),
    "Denver": ("Colorado", 713_000),
    "Portland": ("Oregon", 635_000),
    "Nashville": ("Tennessee", 684_000),
    "Phoenix": ("Arizona", 1_650_000),
}


def _population(e: str, rng: np.random.Generator, start: datetime) -> dict:
    state, base = _CITIES_POP[e]
    return {
        "city": e,
        "state": state,
        "population": int(_jiggle(rng, base, 0.01)),
        "estimate_year": start.year - 1,
        "annual_growth_pct": round(float(rng.uniform(0.2, 2.0)), 1),
    }


def _population_text(e: str, r: dict) -> str:
    return (
        f"The latest official estimate puts {e}, {r['state']} at {r['population']:,} residents "
        f"({r['estimate_year']} estimate), growing about {r['annual_growth_pct']:.1f}% per year."
    )


POPULATION = Template(
    slug="city_population_data",
    scenario="City Population Data",
    sensitivity="low",
    split="test",
    system_prompt="You are a helpful civic data assistant that retrieves official city population estimates.",
    tool_name="get_city_population",
    tool_description="Retrieves the latest official population estimate and annual growth rate for a city.",
    arg_name="city",
    arg_description="The city name, e.g. 'Austin'.",
    entities=tuple(_CITIES_POP),
    ask_forms=("What's the population of {e}?", "How many people live in {e}?"),
    make_result=_population,
    summarize=_population_text,
    followups=(
        lambda c: (f"What's the latest population figure for {c.entity}?", _population_text(c.entity, c.result)),
        lambda c: (
            f"At that growth rate, roughly how many people would {c.entity} have a year later?",
            f"Growing {c.result['annual_growth_pct']:.1f}% from {c.result['population']:,}, {c.entity} would have "
            f"about {round(c.result['population'] * (1 + c.result['annual_growth_pct'] / 100)):,} residents a year "
            f"later.",
        ),
        lambda c: (
            None
            if c.other is None
            else (
                f"Which city has more residents, {c.entity} or {c.other}?",
                _compare(
                    c.entity,
                    c.result["population"],
                    c.other,
                    c.other_result["population"],
                    True,
                    "population",
                    lambda v: f"{int(v):,}",
                ),
            )
        ),
    ),
)

# --- Regulatory Information Service (low, train)

_VAT = {"Germany": (19, 7), "France": (20, 5.5), "United Kingdom": (20, 5), "Italy": (22, 10), "Spain": (21, 10)}


def _vat(e: str, rng: np.random.Generator, start: datetime) -> dict:
    std, red = _VAT[e]
    return {"country": e, "standard_vat_pct": std, "reduced_vat_pct": red, "in_force_as_of": f"{start.year}-01-01"}


def _vat_text(e: str, r: dict) -> str:
    return (
        f"{e}'s standard VAT rate is {r['standard_vat_pct']:g}%, with a reduced rate of "
        f"{r['reduced_vat_pct']:g}% for items such as food and books."
    )


REGULATORY = Template(
    slug="regulatory_information_service",
    scenario="Regulatory Information Service",
    sensitivity="low",
    split="train",
    system_prompt="You are a helpful tax information assistant that provides current regulations such as VAT rates.",
    tool_name="get_vat_rules",
    tool_description="Provides the standard and reduced value-added tax rates in force for a country.",
    arg_name="country",
    arg_description="The country name, e.g. 'Germany'.",
    entities=tuple(_VAT),
    ask_forms=("What are the VAT rates in {e}?", "Can you look up the VAT rules for {e}?"),
    make_result=_vat,
    summarize=_vat_text,
    followups=(
        lambda c: (f"What's the standard VAT rate in {c.entity}?", _vat_text(c.entity, c.result)),
        lambda c: (
            f"How much VAT would be added to a net price of 200 euros in {c.entity} at the standard rate?",
            f"At {c.entity}'s standard rate of {c.result['standard_vat_pct']:g}%, the VAT on 200 euros is "
            f"{2 * c.result['standard_vat_pct']:,.2f} euros.",
        ),
        lambda c: (
            None
            if c.other is None
            else (
                f"Which country has the higher standard VAT rate, {c.entity} or {c.other}?",
                _compare(
                    c.entity,
                    c.result["standard_vat_pct"],
                    c.other,
                    c.other_result["standard_vat_pct"],
                    True,
                    "standard VAT rate",
                    lambda v: f"{v:g}%",
                ),
            )
        ),
    ),
)

# --- University Degree Requirements (low, train)

_DEGREES = {
    "Bachelor of Science in Computer Science": ("CS", 120),
    "Bachelor of Arts in Economics": ("ECON", 120),
    "Bachelor of Science in Mechanical Engineering": ("ME", 128),
    "Bachelor of Arts in Psychology": ("PSY", 120),
    "Bachelor of Science in Biology": ("BIO", 124),
}


def _degree(e: str, rng: np.random.Generator, _: datetime) -> dict:
    code, credits = _DEGREES[e]
    nums = sorted(rng.choice(np.arange(101, 400), size=4, replace=False).tolist())
    return {
        "degree_program": e,
        "credits_required": credits,
        "minimum_gpa": float(rng.choice([2.0, 2.5])),
        "core_courses": [f"{code}{n}" for n in nums],
    }


def _degree_text(e: str, r: dict) -> str:
    c = r["core_courses"]
    return (
        f"The {e} requires {r['credits_required']} credits with a minimum GPA of {r['minimum_gpa']:.1f}, "
        f"including the core courses {', '.join(c[:-1])}, and {c[-1]}."
    )


DEGREE = Template(
    slug="university_degree_requirements",
    article="the ",
    scenario="University Degree Requirements",
    sensitivity="low",
    split="train",
    system_prompt="You are a helpful university assistant that retrieves official degree requirements.",
    tool_name="get_degree_requirements",
    tool_description="Fetches the official curriculum and graduation requirements of a degree program.",
    arg_name="degree_program",
    arg_description="The degree program, e.g. 'Bachelor of Science in Computer Science'.",
    entities=tuple(_DEGREES),
    ask_forms=("What are the graduation requirements for the {e}?", "Can you tell me what the {e} requires?"),
    make_result=_degree,
    summarize=_degree_text,
    followups=(
        lambda c: (
            f"Which core courses does the {c.entity} include?",
            f"The core courses for the {c.entity} are {', '.join(c.result['core_courses'])}.",
        ),
        lambda c: (
            f"If I've completed 80 credits, how many more do I need for the {c.entity}?",
            f"The {c.entity} requires {c.result['credits_required']} credits, so you need "
            f"{c.result['credits_required'] - 80} more.",
        ),
        lambda c: (
            None
            if c.other is None
            else (
                f"Which program requires more credits, the {c.entity} or the {c.other}?",
                _compare(
                    f"the {c.entity}",
                    c.result["credits_required"],
                    f"the {c.other}",
                    c.other_result["credits_required"],
                    True,
                    "credit requirement",
                    lambda v: f"{int(v)} credits",
                ),
            )
        ),
    ),
)

TEMPLATES: tuple[Template, ...] = (
    BAGGAGE,
    POPULATION,
    REGULATORY,
    DEGREE,  # low: test, test, train, train
    TIDE,
    MOVIES,
    HOTEL,
    WEATHER,
    FX,  # medium: test x3, train x2
    STOCK_ORDER_BOOK,
    LIVE_SCORE,
    CRYPTO,
    BETTING,
    ECOMMERCE,  # high: test x2, train x3
)


def templates_for(split: str | None = None) -> tuple[Template, ...]:
    """Templates of one split ("train" / "test"), or all of them for None / "all"."""
    if split in (None, "all"):
        return TEMPLATES
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train', 'test' or None, got {split!r}")
    return tuple(t for t in TEMPLATES if t.split == split)
