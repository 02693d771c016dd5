"""Hand-written knowledge base for Time Puzzles: well-known dated facts only.

Everything here is public, widely documented history (birth/death dates, presidential terms, host years, event
dates). Dates are inclusive and Gregorian. Entries whose date is commonly disputed (e.g. the start and end of World
War II, Amelia Earhart's death) are deliberately left out, and host cities that hosted the same event more than once
(London, Tokyo, Brazil, Germany) are not used as event names, so every text maps to one period.
"""

from __future__ import annotations

from datetime import date

# Famous people, (name, born, died). Only people who have died, so "X was alive" is a closed period.
PEOPLE: tuple[tuple[str, str, str], ...] = (
    ("Albert Einstein", "1879-03-14", "1955-04-18"),
    ("Steve Jobs", "1955-02-24", "2011-10-05"),
    ("Kobe Bryant", "1978-08-23", "2020-01-26"),
    ("Michael Jackson", "1958-08-29", "2009-06-25"),
    ("Diana, Princess of Wales", "1961-07-01", "1997-08-31"),
    ("John Lennon", "1940-10-09", "1980-12-08"),
    ("Elvis Presley", "1935-01-08", "1977-08-16"),
    ("Martin Luther King Jr.", "1929-01-15", "1968-04-04"),
    ("Nelson Mandela", "1918-07-18", "2013-12-05"),
    ("Stephen Hawking", "1942-01-08", "2018-03-14"),
    ("Queen Elizabeth II", "1926-04-21", "2022-09-08"),
    ("Mahatma Gandhi", "1869-10-02", "1948-01-30"),
    ("Marie Curie", "1867-11-07", "1934-07-04"),
    ("Pablo Picasso", "1881-10-25", "1973-04-08"),
    ("Walt Disney", "1901-12-05", "1966-12-15"),
    ("Bruce Lee", "1940-11-27", "1973-07-20"),
    ("Freddie Mercury", "1946-09-05", "1991-11-24"),
    ("Muhammad Ali", "1942-01-17", "2016-06-03"),
    ("Neil Armstrong", "1930-08-05", "2012-08-25"),
    ("Charlie Chaplin", "1889-04-16", "1977-12-25"),
    ("Audrey Hepburn", "1929-05-04", "1993-01-20"),
    ("Winston Churchill", "1874-11-30", "1965-01-24"),
    ("Pope John Paul II", "1920-05-18", "2005-04-02"),
    ("Whitney Houston", "1963-08-09", "2012-02-11"),
    ("David Bowie", "1947-01-08", "2016-01-10"),
    ("Robin Williams", "1951-07-21", "2014-08-11"),
    ("Nikola Tesla", "1856-07-10", "1943-01-07"),
    ("Mao Zedong", "1893-12-26", "1976-09-09"),
    ("Deng Xiaoping", "1904-08-22", "1997-02-19"),
    ("Ayrton Senna", "1960-03-21", "1994-05-01"),
    ("Diego Maradona", "1960-10-30", "2020-11-25"),
    ("Pelé", "1940-10-23", "2022-12-29"),
    ("Frida Kahlo", "1907-07-06", "1954-07-13"),
    ("Ernest Hemingway", "1899-07-21", "1961-07-02"),
    ("Alan Turing", "1912-06-23", "1954-06-07"),
    ("Grace Kelly", "1929-11-12", "1982-09-14"),
    ("Sigmund Freud", "1856-05-06", "1939-09-23"),
    ("Charles de Gaulle", "1890-11-22", "1970-11-09"),
)

# US presidents, (name, ((start, end), ...)). Terms are inclusive of both inauguration days: on a transition day
# both the outgoing and the incoming president held office for part of the day. The generator rejects puzzles whose
# answer depends on a transition day (see TimePuzzle ambiguity checks). end None = still in office: the term runs
# past D's end, so the generator rejects puzzles that a date after D might satisfy.
US_PRESIDENTS: tuple[tuple[str, tuple[tuple[str, str | None], ...]], ...] = (
    ("Herbert Hoover", (("1929-03-04", "1933-03-04"),)),
    ("Franklin D. Roosevelt", (("1933-03-04", "1945-04-12"),)),
    ("Harry S. Truman", (("1945-04-12", "1953-01-20"),)),
    ("Dwight D. Eisenhower", (("1953-01-20", "1961-01-20"),)),
    ("John F. Kennedy", (("1961-01-20", "1963-11-22"),)),
    ("Lyndon B. Johnson", (("1963-11-22", "1969-01-20"),)),
    ("Richard Nixon", (("1969-01-20", "1974-08-09"),)),
    ("Gerald Ford", (("1974-08-09", "1977-01-20"),)),
    ("Jimmy Carter", (("1977-01-20", "1981-01-20"),)),
    ("Ronald Reagan", (("1981-01-20", "1989-01-20"),)),
    ("George H. W. Bush", (("1989-01-20", "1993-01-20"),)),
    ("Bill Clinton", (("1993-01-20", "2001-01-20"),)),
    ("George W. Bush", (("2001-01-20", "2009-01-20"),)),
    ("Barack Obama", (("2009-01-20", "2017-01-20"),)),
    ("Donald Trump", (("2017-01-20", "2021-01-20"), ("2025-01-20", None))),
    ("Joe Biden", (("2021-01-20", "2025-01-20"),)),
)

# Years in which the games were actually held (Tokyo 2020 took place in 2021; 1916/1940/1944 were cancelled).
SUMMER_OLYMPIC_YEARS = (1896, 1900, 1904, 1908, 1912, 1920, 1924, 1928, 1932, 1936, 1948, 1952, 1956, 1960, 1964,
                        1968, 1972, 1976, 1980, 1984, 1988, 1992, 1996, 2000, 2004, 2008, 2012, 2016, 2021, 2024)
# Years whose Summer-Olympics status depends on interpretation: 1906 (Intercalated Games, not recognised by the
# IOC), and both 2020 and 2021 (the Games named "Tokyo 2020" were held in 2021: "the 2020 Olympics" reads as
# either year). Puzzles never hinge on them.
SUMMER_OLYMPIC_AMBIGUOUS_YEARS = (1906, 2020, 2021)
WINTER_OLYMPIC_YEARS = (1924, 1928, 1932, 1936, 1948, 1952, 1956, 1960, 1964, 1968, 1972, 1976, 1980, 1984, 1988,
                        1992, 1994, 1998, 2002, 2006, 2010, 2014, 2018, 2022)
FIFA_WORLD_CUP_YEARS = (1930, 1934, 1938, 1950, 1954, 1958, 1962, 1966, 1970, 1974, 1978, 1982, 1986, 1990, 1994,
                        1998, 2002, 2006, 2010, 2014, 2018, 2022)

# Single-day events, (noun phrase, date). The phrase never states the date.
DAY_EVENTS: tuple[tuple[str, str], ...] = (
    ("the Apollo 11 Moon landing", "1969-07-20"),
    ("the fall of the Berlin Wall", "1989-11-09"),
    ("the Japanese attack on Pearl Harbor", "1941-12-07"),
    ("the terrorist attacks that destroyed the Twin Towers of the World Trade Center", "2001-09-11"),
    ("the assassination of John F. Kennedy", "1963-11-22"),
    ("the sinking of the Titanic", "1912-04-15"),
    ("the D-Day landings in Normandy", "1944-06-06"),
    ("the Chernobyl nuclear disaster", "1986-04-26"),
    ("the release of the first iPhone in the United States", "2007-06-29"),
    ("the Wright brothers' first powered flight", "1903-12-17"),
    ("the atomic bombing of Hiroshima", "1945-08-06"),
    ("the launch of Sputnik 1", "1957-10-04"),
    ("the proclamation of the People's Republic of China", "1949-10-01"),
    ("German reunification", "1990-10-03"),
    ("Mikhail Gorbachev's resignation as President of the Soviet Union", "1991-12-25"),
    ("the Space Shuttle Challenger disaster", "1986-01-28"),
    ("the Space Shuttle Columbia disaster", "2003-02-01"),
    ("the introduction of euro banknotes and coins", "2002-01-01"),
    ("the handover of Hong Kong from the United Kingdom to China", "1997-07-01"),
    ("Nelson Mandela's release from prison", "1990-02-11"),
    ("the Armistice that ended the fighting of World War I", "1918-11-11"),
    ("Black Tuesday, the worst day of the Wall Street Crash", "1929-10-29"),
    ("the bankruptcy filing of Lehman Brothers", "2008-09-15"),
    ("the great Indian Ocean earthquake and tsunami", "2004-12-26"),
    ("the Tohoku earthquake and tsunami in Japan", "2011-03-11"),
    ("Barack Obama's first inauguration", "2009-01-20"),
    ("the WHO's declaration of COVID-19 as a pandemic", "2020-03-11"),
    ("the launch of TheFacebook (later Facebook)", "2004-02-04"),
    ("Martin Luther King Jr.'s \"I Have a Dream\" speech", "1963-08-28"),
    ("Yuri Gagarin's first human spaceflight", "1961-04-12"),
    ("the signing of the Treaty of Versailles", "1919-06-28"),
    ("the assassination of Archduke Franz Ferdinand in Sarajevo", "1914-06-28"),
    ("the United Kingdom's formal departure from the European Union", "2020-01-31"),
    ("the Brexit referendum in the United Kingdom", "2016-06-23"),
    ("the coronation of Queen Elizabeth II", "1953-06-02"),
    ("the launch of the Hubble Space Telescope", "1990-04-24"),
    ("the launch of the James Webb Space Telescope", "2021-12-25"),
    ("the launch of Wikipedia", "2001-01-15"),
    ("the first Super Bowl", "1967-01-15"),
    ("the opening of the Panama Canal", "1914-08-15"),
    ("the dedication of the Statue of Liberty", "1886-10-28"),
    ("the shooting of Abraham Lincoln at Ford's Theatre", "1865-04-14"),
    ("the San Francisco earthquake that destroyed much of the city with the fires that followed", "1906-04-18"),
    ("the mining of the Bitcoin genesis block", "2009-01-03"),
    ("the public release of ChatGPT", "2022-11-30"),
    ("the Japanese surrender ceremony aboard the USS Missouri", "1945-09-02"),
    ("the first ascent of Mount Everest by Edmund Hillary and Tenzing Norgay", "1953-05-29"),
    ("the entry into force of the United Nations Charter", "1945-10-24"),
    ("the Hindenburg airship disaster", "1937-05-06"),
    ("the Boston Marathon bombing", "2013-04-15"),
    ("Charles Lindbergh's landing in Paris after the first solo nonstop transatlantic flight", "1927-05-21"),
)

# Multi-day periods, (noun phrase, first day, last day), inclusive. `ambiguous_ends`: sources disagree on whether the
# boundary days belong to the period, so the generator rejects puzzles that hinge on them.
SPAN_EVENTS: tuple[tuple[str, str, str, bool], ...] = (
    ("the Korean War (from the North Korean invasion to the armistice)", "1950-06-25", "1953-07-27", True),
    ("the fighting of World War I (from its outbreak to the Armistice)", "1914-07-28", "1918-11-11", True),
    ("the time between the start of construction of the Berlin Wall and its fall", "1961-08-13", "1989-11-09", True),
    ("the Cuban Missile Crisis", "1962-10-16", "1962-10-28", True),
    ("the Apollo 11 mission (from launch to splashdown)", "1969-07-16", "1969-07-24", False),
    ("nationwide Prohibition of alcohol in the United States", "1920-01-17", "1933-12-05", True),
    ("Margaret Thatcher's tenure as UK Prime Minister", "1979-05-04", "1990-11-28", True),
    ("the Summer Olympic Games in Beijing (opening to closing ceremony)", "2008-08-08", "2008-08-24", False),
    ("the Summer Olympic Games in Rio de Janeiro (opening to closing ceremony)", "2016-08-05", "2016-08-21", False),
    ("the Summer Olympic Games in Sydney (opening to closing ceremony)", "2000-09-15", "2000-10-01", False),
    ("the Summer Olympic Games in Atlanta (opening to closing ceremony)", "1996-07-19", "1996-08-04", False),
    ("the Winter Olympic Games in Vancouver (opening to closing ceremony)", "2010-02-12", "2010-02-28", False),
    ("the Winter Olympic Games in Salt Lake City (opening to closing ceremony)", "2002-02-08", "2002-02-24", False),
    ("the FIFA World Cup in Qatar (opening match to final)", "2022-11-20", "2022-12-18", False),
    ("the FIFA World Cup in South Africa (opening match to final)", "2010-06-11", "2010-07-11", False),
    ("the FIFA World Cup in Russia (opening match to final)", "2018-06-14", "2018-07-15", False),
)


def iso(text: str) -> date:
    return date.fromisoformat(text)
