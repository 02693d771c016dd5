"""TicToc scenario registry: the paper's 76 scenarios (Table 6) and their train/test split (Appendix D.1).

Also maps the messy record ids of the released data (``flight_rep_fail_7``,
``airlinebaggagepolicyexample_1``...) to scenarios through an explicit alias table.
Self-contained: nothing here reads data files at run time.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Literal

Sensitivity = Literal["low", "medium", "high"]


def _normalise(text: str) -> str:
    """Lowercase and drop every non-alphanumeric character."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


@dataclass(frozen=True)
class Scenario:
    """One TicToc scenario as listed in Table 6 of the paper."""

    name: str
    description: str
    sensitivity: str
    io: str
    samples: int
    split: str

    @property
    def slug(self) -> str:
        """Stable snake_case key, e.g. ``chemical_safety_data_sheet_sds``."""
        return re.sub(r"[^a-z0-9]+", "_", self.name.lower()).strip("_")


# Appendix D.1: scenarios of the test split; every other scenario is train.
_TEST_SPLIT = frozenset(
    {
        # low
        "Airline Baggage Policy",
        "Astronomical Object Info",
        "Chemical Safety Data Sheet (SDS)",
        "City Population Data",
        "Office Finder",
        "Patent Metadata Lookup",
        "Public Health Screening Guidelines",
        "Streaming Service Library Checker",
        # medium
        "Airport Security Line Wait Time",
        "Hiking Trail Condition Report",
        "Hotel Room Availability & Rates",
        "Job Board Live Listings",
        "Movie Showtimes Finder",
        "Tide Height Tracker",
        # high
        "Cloud Server Load Balancer",
        "Emergency Alert / 911 Dispatch Interface",
        "ICU Vitals Monitor",
        "Live Auction Price Retrieval",
        "Live Sports Score Tracker",
        "Live Vehicle GPS Tracker",
        "Live Weather Sensor Data",
        "Restaurant Wait Time Checker",
        "Ride-Hailing Dispatch",
        "Stock Market Order Book",
        "Train Delay Tracker",
        "Urban Parking-Spot Reservation",
    }
)

# Table 6 verbatim, in order: (name, description, io, samples) grouped by sensitivity.
_TABLE6: dict[str, list[tuple[str, str, str, int]]] = {
    "low": [
        ("Regulatory Information Service", "Provides information on regulations like tax brackets.", "R", 20),
        ("University Degree Requirements", "Lists the official curriculum and graduation requirements.", "R", 21),
        (
            "Public Health Screening Guidelines",
            "Provides public health recommendations for medical screenings.",
            "R",
            20,
        ),
        (
            "Airline Baggage Policy",
            "Current luggage allowance, size limits, and fees for an airline carrier.",
            "R",
            20,
        ),
        ("Bank Interest Rate Checker", "Retrieves the advertised Annual Percentage Yield (APY) for a bank.", "R", 20),
        ("Recorded Property Deed Lookup", "Retrieves public land-record documents for a parcel.", "R", 20),
        (
            "Astronomical Object Info",
            "Returns static data and properties about celestial bodies like planets.",
            "R",
            20,
        ),
        ("Company Policy Lookup", "Retrieves corporate policies like WFH rules and benefits.", "R", 20),
        ("QRH Guidelines", "Provides quick-reference pilot procedures for common failures.", "R", 17),
        (
            "Protected CITES / Protected Places Rules",
            "Returns protected-area rules on access, hunting, and activities.",
            "R",
            18,
        ),
        (
            "Manufacturer Product Manual Retriever",
            "Retrieves official manuals and technical specs for a model.",
            "R",
            20,
        ),
        ("ISO / Industry Standard Text", "Retrieves published text for a specific standard version.", "R", 20),
        (
            "Chemical Safety Data Sheet (SDS)",
            "Provides hazards, PPE guidance, and safe handling instructions.",
            "R",
            20,
        ),
        (
            "Programming Language Syntax Helper",
            "Shows correct syntax for a specific language/version command.",
            "R",
            20,
        ),
        ("Public Attraction Hours", "Retrieves typical operating hours that may vary seasonally.", "R", 20),
        ("Store Location Finder", "Finds nearest chain store address and basic location details.", "R", 20),
        ("Airport Code Lookup", "Provides IATA and ICAO codes for airports worldwide.", "R", 10),
        ("Endangered Species List", "Checks conservation status from official lists and registries.", "R", 20),
        ("Streaming Service Library Checker", "Checks if a title is currently on a platform.", "R", 18),
        ("Office Finder", "Returns staff/professor office location within a building.", "R", 20),
        ("Class Room Finder", "Returns a student's classroom location with directions.", "R", 17),
        ("Patent Metadata Lookup", "Retrieves bibliographic fields for a published patent record.", "R", 20),
        ("Archived Government Legislation Text", "Retrieves the official as-published text of a past law.", "R", 9),
        ("UN Country Membership List", "Lists UN members and their official join dates.", "R", 20),
        ("EV Station Status", "Reports whether a charging station is working or broken.", "R", 14),
        (
            "Developing/Developed Countries Info",
            "Provides country development classification and brief context.",
            "R",
            20,
        ),
        ("Public Transportation Route Mapper", "Describes fixed bus/subway routes and primary stops.", "R", 20),
        ("City Population Data", "Retrieves the latest official estimate for a city population.", "R", 20),
        ("Pharmacological Database", "Lists drug uses, interactions, contraindications, and properties.", "R", 20),
    ],
    "medium": [
        ("Job Board Live Listings", "Searches for currently open positions and their application status.", "R", 20),
        ("Weather Forecast Service", "Fetches the weather forecast for the next 1-10 days.", "R", 20),
        ("Package / Shipment Tracker", "Provides the current transit status and estimated time of arrival.", "R", 23),
        ("Laundry Service Order Status", "Checks if clothes dropped off earlier are ready for pickup today.", "R", 24),
        (
            "In-Game Marketplace Price Checker",
            "Current lowest price for a tradable item in a multiplayer online game.",
            "R",
            24,
        ),
        ("Airport Security Line Wait Time", "Shows real-time airport security wait times.", "R", 18),
        ("Tide Height Tracker", "Shows the live measured water level at a specific coastal point.", "R", 20),
        ("Pollution Emission Monitor", "Shows real-time emission data from a monitoring site.", "R", 20),
        ("Movie Showtimes Finder", "Retrieves local showtimes for the current week schedule.", "R", 21),
        ("Currency Exchange Rate", "Provides daily FX rates for travel or budgeting use.", "R", 21),
        ("Grocery Store Sale Checker", "Lists weekly sale items and discounts at a store.", "R", 21),
        ("Library Book Availability", "Checks whether a physical book is on shelf or out.", "R", 19),
        ("Real Estate Listings", "Shows current homes for sale or rent in an area.", "R", 30),
        ("Ski Resort Snow Report", "Reports snow depth, lift status, and open trails today.", "R", 27),
        ("Hiking Trail Condition Report", "Summarizes recent trail conditions, closures, and hazards.", "R", 27),
        ("Surf Report", "Predicts wave height, winds, and tide timing at a spot.", "R", 24),
        ("Visa Case Status", "Checks government case stage updates and processing status.", "R", 21),
        ("Subscription / Account Status", "Checks if a subscription is active and its expiry time.", "R", 21),
        (
            "Hotel Room Availability & Rates",
            "Checks for room availability and fluctuating prices at a hotel.",
            "R&W",
            39,
        ),
        ("Tee Time Booker", "Finds and books available times to play at a golf course.", "R&W", 41),
        (
            "Prescription Fulfillment & Hold",
            "Checks stock and places a hold on a prescription for immediate pickup.",
            "R&W",
            40,
        ),
        ("Flight Search & Booking", "Live flight search, and the ability to hold or book a flight.", "R&W", 40),
        (
            "Appointment Availability (Clinic)",
            "Finds open clinic slots for non-emergency appointments nearby.",
            "R&W",
            40,
        ),
        ("Appointment Availability (Haircut)", "Finds open salon/barber slots and supports scheduling.", "R&W", 40),
        (
            "Rental Car Availability & Rate Quote",
            "Checks rental inventory and returns a quoted daily rate.",
            "R&W",
            40,
        ),
    ],
    "high": [
        (
            "Live Sports Betting Odds Retrieval",
            "Provides rapidly fluctuating betting odds for an in-progress game.",
            "R",
            20,
        ),
        ("Live Auction Price Retrieval", "Checking price in a fast-paced online auction.", "R", 20),
        ("E-commerce Product Stock Checker", "Checks current price and inventory for a retail product.", "R", 35),
        ("Live Traffic Navigation & ETA", "Calculates travel ETAs using real-time traffic data.", "R", 24),
        ("Live Sports Score Tracker", "Retrieves the current score and status of an ongoing sports game.", "R", 21),
        ("Live Vehicle GPS Tracker", "Provides the precise location of a vehicle like a delivery truck.", "R", 22),
        ("Live Weather Sensor Data", "Reads data directly from a weather sensor (e.g., wind speed).", "R", 24),
        ("Train Delay Tracker", "Reports active delays and disruptions for train services.", "R", 20),
        (
            "Restaurant Wait Time Checker",
            "Gives the current estimated wait time for a table at a restaurant.",
            "R",
            19,
        ),
        (
            "Stock Market Order Book",
            "Shows the real-time list of buy and sell orders for a particular stock.",
            "R",
            20,
        ),
        ("Cryptocurrency Exchange Retrieval", "Get cryptocurrency live trade prices.", "R", 18),
        ("Cloud Server Load Balancer", "Routes processes based on real-time server CPU load.", "R&W", 40),
        ("ICU Vitals Monitor", "Streams live patient vitals and controls alarm thresholds.", "R&W", 40),
        ("Power Grid Control System", "Manages power grid distribution with real-time control signals.", "R&W", 40),
        ("Ride-Hailing Dispatch", "Requests immediate rideshare pickup and returns live ETA.", "R&W", 25),
        ("Taxi Dispatch System", "Finds available taxis nearby and dispatches a pickup.", "R&W", 40),
        (
            "Emergency Alert / 911 Dispatch Interface",
            "Submits emergency details and receives responder status updates.",
            "R&W",
            18,
        ),
        (
            "Ambulance / Emergency Resource Dispatch",
            "Allocates emergency vehicles and tracks dispatch progress live.",
            "R&W",
            40,
        ),
        ("Urban Parking-Spot Reservation", "Claims a scarce spot that can be taken instantly.", "R&W", 82),
        ("Concert Ticket", "Checks live ticket availability and completes a purchase.", "R&W", 21),
        ("Gasoline Dispatcher", "Dispatches fuel, tracks volume remaining, and fulfillment status.", "R&W", 29),
        ("Stock Trading (Order Submission)", "Submits a trade order for immediate market execution.", "R&W", 21),
    ],
}

SCENARIOS: tuple[Scenario, ...] = tuple(
    Scenario(name, description, sensitivity, io, samples, "test" if name in _TEST_SPLIT else "train")
    for sensitivity, rows in _TABLE6.items()
    for name, description, io, samples in rows
)

UNKNOWN = Scenario(
    name="unknown",
    description="Record id matching no TicToc scenario.",
    sensitivity="unknown",
    io="unknown",
    samples=0,
    split="unknown",
)

# Normalised id stem (counter and variant suffix removed) -> Table 6 name, for stems of the released data
# (chengez/TicToc data/, c0b2b56) that differ from the scenario's own name. Decided from each record's
# system prompt and tool names, not from the stem alone.
ALIASES: dict[str, str] = {
    # "...example" stems are the hand-written exemplar trajectories of the scenario (paper Sec. 2.2).
    "airlinebaggagepolicyexample": "Airline Baggage Policy",
    "publichealthscreeningexample": "Public Health Screening Guidelines",
    "regulatoryinfoserviceexample": "Regulatory Information Service",
    "universitydegreeexample": "University Degree Requirements",
    # Tool retrieve_bank_apy: "advertised APY", exactly Table 6's description.
    "bankapyexample": "Bank Interest Rate Checker",
    "publishedbankinterestratechecker": "Bank Interest Rate Checker",
    "jobboardlisting": "Job Board Live Listings",
    # Tool search_package_status ("status and ETA of packages"); not Live Vehicle GPS Tracker, which has its own stem.
    "deliverytracking": "Package / Shipment Tracker",
    # Tool fetch_top_cheapest_items: lowest price of a tradable item in an MMO.
    "ingameitempricetracker": "In-Game Marketplace Price Checker",
    "tideheight": "Tide Height Tracker",
    "pollutionemission": "Pollution Emission Monitor",
    # Tool check_weather_forecast (days-ahead forecasts); the live sensor scenario is live_weather_sensor_data.
    "weatherforecast": "Weather Forecast Service",
    "hotel": "Hotel Room Availability & Rates",
    "flight": "Flight Search & Booking",
    # Tools check_stock/place_hold on medicine for immediate pickup.
    "pharmacymedicinefulfillmenthold": "Prescription Fulfillment & Hold",
    "livesportsbetting": "Live Sports Betting Odds Retrieval",
    "liveauctionprice": "Live Auction Price Retrieval",
    # Tool search_product_info: price and availability, i.e. Table 6's "price and inventory".
    "ecommerceproductpriceandavailability": "E-commerce Product Stock Checker",
    "livetrafficnavigationandetaupdates": "Live Traffic Navigation & ETA",
    "traindelay": "Train Delay Tracker",
    "restaurantwaittime": "Restaurant Wait Time Checker",
    # Tool retrieve_crypto_rate: the high-sensitivity crypto scenario, not the medium "Currency Exchange Rate".
    "cryptocurrencyexchange": "Cryptocurrency Exchange Retrieval",
    # Records monitor ICU vitals and set alarms/equipment (get_icu_vitals, set_alarm...).
    "livemedicaldevicemonitor": "ICU Vitals Monitor",
    # Tools check_power_capacity/adjust_voltage/increase_capacity on a live grid.
    "powergridoperationalcontrol": "Power Grid Control System",
    # System prompt: "submit orders ... for immediate execution"; the order-book scenario has its own stem.
    "stocktrading": "Stock Trading (Order Submission)",
}

# Canonical read+write variant (paper Sec. 2.2) -> suffix spellings seen in record ids.
_VARIANT_SPELLINGS: dict[str, tuple[str, ...]] = {
    "in_context_availability": ("in_context_cnt", "incontextavail", "in_context_availability"),
    "repeat_after_failure": ("rep_after_failure", "rep_fail", "repeat_after_failure"),
    "request_repeat": ("request_repeat", "requestrepeat"),
    "user_confirmation": ("usr_confirm", "usrconfirm", "user_confirmation"),
}
_VARIANT_OF_SPELLING = {s: v for v, spellings in _VARIANT_SPELLINGS.items() for s in spellings}
# A suffix only counts after a separator, so a stem merely ending in the same letters is left alone.
_VARIANT_RE = re.compile(
    r"[_\-\s](" + "|".join(sorted(map(re.escape, _VARIANT_OF_SPELLING), key=len, reverse=True)) + r")$",
    re.IGNORECASE,
)
_COUNTER_RE = re.compile(r"_\d+$")


def _build_index() -> tuple[dict[str, Scenario], dict[str, Scenario]]:
    """Name/slug index and record-stem index, checked for conflicts once at import."""
    by_name = {s.name: s for s in SCENARIOS}
    names: dict[str, Scenario] = {}
    for s in SCENARIOS:
        names[s.name.lower()] = s
        names[s.slug] = s
    stems: dict[str, Scenario] = {}
    for key, s in [(_normalise(s.name), s) for s in SCENARIOS] + [
        (stem, by_name[target]) for stem, target in ALIASES.items()
    ]:
        if stems.get(key, s) is not s:
            raise ValueError(f"stem {key!r} maps to both {stems[key].name!r} and {s.name!r}")
        stems[key] = s
    return names, stems


_BY_NAME, _BY_STEM = _build_index()


class UnknownScenarioError(ValueError):
    """A record id that maps to no TicToc scenario."""


def get_scenario(name_or_slug: str) -> Scenario:
    """Scenario by exact Table 6 name or slug, case-insensitive."""
    try:
        return _BY_NAME[name_or_slug.strip().lower()]
    except KeyError:
        close = difflib.get_close_matches(name_or_slug, [s.name for s in SCENARIOS], n=3)
        raise KeyError(f"no scenario named {name_or_slug!r}; close matches: {close}") from None


def _split_id(record_id: str) -> tuple[str, str | None]:
    """(stem without counter or variant suffix, variant suffix as written or None)."""
    stem = _COUNTER_RE.sub("", record_id.strip())
    match = _VARIANT_RE.search(stem)
    if match is None:
        return stem, None
    return stem[: match.start()], match.group(1)


def variant_of(record_id: str) -> str | None:
    """Canonical read+write variant named by the id's suffix, or None for ids without one."""
    suffix = _split_id(record_id)[1]
    return None if suffix is None else _VARIANT_OF_SPELLING[suffix.lower()]


def resolve_scenario_id(record_id: str, *, unknown: str = "error") -> Scenario:
    """Scenario of a TicToc record id; unknown ids raise (``unknown="error"``) or give UNKNOWN (``"bucket"``)."""
    if unknown not in ("error", "bucket"):
        raise ValueError(f"unknown must be 'error' or 'bucket', not {unknown!r}")
    stem = _normalise(_split_id(record_id)[0])
    scenario = _BY_STEM.get(stem)
    if scenario is not None:
        return scenario
    if unknown == "bucket":
        return UNKNOWN
    # Fuzzy matching only feeds the message: a near miss is reported, never taken.
    close = difflib.get_close_matches(stem, list(_BY_STEM), n=3, cutoff=0.6)
    hint = ", ".join(f"{c!r} -> {_BY_STEM[c].name!r}" for c in close) or "none"
    raise UnknownScenarioError(
        f"record id {record_id!r} (stem {stem!r}) matches no TicToc scenario; close matches: {hint}. "
        "Add the stem to timealign.data.scenarios.ALIASES if it is a new spelling."
    )


def scenarios_by(split: str | None = None, sensitivity: str | None = None) -> list[Scenario]:
    """Scenarios in Table 6 order, filtered by split and/or sensitivity."""
    if split not in (None, "train", "test"):
        raise ValueError(f"split must be 'train', 'test' or None, not {split!r}")
    if sensitivity not in (None, "low", "medium", "high"):
        raise ValueError(f"sensitivity must be 'low', 'medium', 'high' or None, not {sensitivity!r}")
    return [
        s
        for s in SCENARIOS
        if (split is None or s.split == split) and (sensitivity is None or s.sensitivity == sensitivity)
    ]
