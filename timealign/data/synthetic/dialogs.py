"""Synthetic TimelyChat-style dialogs for the embedded default: everyday events with typical durations.

Each dialog follows the construction of the TimelyChat paper (Sec. 4.1, Appendix A.1): one speaker (the "actor") is
about to do something that takes time, the other is elsewhere; the dialog talks about the event without naming its
duration; after the partner's last turn, time passes, and the actor's final message comes in two versions, a
*timely* one (written after the event: "I feel much better now!") and an *untimely* one (an instant reply before it:
"Give me a moment, brb"). Records are in the TimelyChat evaluation layout (`speaker_list`, `context`,
`target_speaker`, `time_elapsed`, `timely_response`, `untimely_response`, `narrative`, `duration`, `id`), so they go
through the same loader and validation as real data.

Learnable delays: the delay is the event's duration, drawn from 1-3 typical values per event (a shower takes 15-30
minutes, a night's sleep 7-9 hours), and the event is named in the context (the announcement), so "which event" fixes
the interval bucket. The event table spans the paper's buckets (Appendix A.3: 5 minutes to a full day). Everything
is drawn from one `random.Random(seed)`: the same (n, seed, split) gives the same records.

    python -m timealign.data.synthetic layout=timelychat n=1000 seed=0 out=dialogs.jsonl
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from timealign.render.intervals import render_minutes


@dataclass(frozen=True)
class Event:
    key: str
    narrative: str
    minutes: tuple[float, ...]  # typical durations; one is drawn per dialog
    announce: tuple[str, ...]  # the actor says what they are about to do
    react: tuple[str, ...]  # the partner's reaction
    timely: tuple[str, ...]  # the actor afterwards
    instant: tuple[str, ...]  # the actor right away, before the event


EVENTS: tuple[Event, ...] = (
    Event(
        "shower",
        "After a long day, they took a shower before bed.",
        (15, 20, 30),
        ("I finally got home. Gonna take a shower now, I'm exhausted.", "Ugh I'm so sweaty, jumping in the shower."),
        ("Wash all the fatigue off!", "Good idea, you'll feel better after."),
        ("I feel so refreshed now! You still up?", "Okay, I'm clean and alive again. What were you saying?"),
        ("Sure, give me a moment. brb", "Haha thanks, I'm heading to the bathroom now."),
    ),
    Event(
        "exam",
        "They took a calculus final exam.",
        (90, 120, 180),
        ("I'm about to take the calculus final. I'm so nervous.", "Exam starts in a minute, wish me luck."),
        ("You studied so hard, you'll do great!", "Don't panic, you know this stuff."),
        ("It's over! It was easier than I expected.", "Just finished the exam. I think I did okay!"),
        ("Thanks for cheering me up. I hope it's not that hard.", "Okay, phones off now. Talk soon!"),
    ),
    Event(
        "gym",
        "They worked out at the gym.",
        (60, 90, 120),
        ("I'm heading to the gym now. Leg day.", "Going to work out at the gym, wanna join?"),
        ("Enjoy your routine!", "Have a good workout!"),
        ("Done! My legs are shaking. Chest tomorrow?", "Back from the gym, that was a brutal session."),
        ("Gonna work out hard today. Chest tomorrow?", "Alright, grabbing my shoes and leaving now."),
    ),
    Event(
        "sleep",
        "They were tired and went to bed early.",
        (420, 480, 540),
        ("I'm so tired, I'm going to bed early tonight.", "Can barely keep my eyes open. Time to sleep."),
        ("Sleep tight!", "Good night, rest well."),
        ("Good morning! Did you sleep well too?", "Morning! I slept like a rock."),
        ("Good night. I'll text you in the morning.", "Night night, talk tomorrow."),
    ),
    Event(
        "bus",
        "They took an intercity bus to their hometown.",
        (240, 300, 360),
        ("I'm on the intercity bus to my hometown now.", "Just got on the long bus ride home."),
        ("Have a nice trip! Your family must be waiting.", "Safe travels!"),
        ("Finally home! That bus ride took forever.", "Just arrived, my parents made dinner already."),
        ("I'm gonna sleep on the bus. See you in a few hours.", "The bus is leaving now, bye for now."),
    ),
    Event(
        "game",
        "They played an online game with friends.",
        (30, 40),
        ("We have a match starting now, gotta play.", "My team is waiting for me in the game."),
        ("Good luck, win it!", "Go get them!"),
        ("We won! It was so close at the end.", "Game over, we lost but it was fun."),
        ("I'll be back after the game. Wish me luck!", "Okay, logging in now."),
    ),
    Event(
        "cooking",
        "They cooked dinner for their family.",
        (40, 45, 60),
        ("I'm about to start cooking dinner for everyone.", "Time to make dinner, pasta tonight."),
        ("Yum, save me some!", "Don't burn anything!"),
        ("Dinner was a hit, everyone had seconds.", "Finished cooking and eating, I'm so full."),
        ("Okay, chopping onions now, talk in a bit.", "Let me go start the water boiling."),
    ),
    Event(
        "laundry",
        "They did a load of laundry at the laundromat.",
        (60, 75),
        ("Heading to the laundromat with a huge bag of clothes.", "Laundry day, ugh."),
        ("Bring a book, it takes forever.", "At least you'll have clean clothes."),
        ("All washed and folded. Smells so good.", "Laundry is done, finally."),
        ("Just putting the coins in now.", "Okay, loading the machine, brb."),
    ),
    Event(
        "haircut",
        "They got a haircut at the barber.",
        (20, 30, 40),
        ("I'm at the barber, it's my turn now.", "Getting a haircut, finally."),
        ("Don't let them cut it too short!", "Send a picture after!"),
        ("What do you think? I love how it turned out.", "New haircut done! Feels so light."),
        ("Sitting in the chair now, wish me luck.", "He's about to start, talk soon."),
    ),
    Event(
        "movie",
        "They watched a movie at the theater.",
        (120, 150),
        ("The movie is about to start, phones off!", "At the theater, the trailers are playing."),
        ("Enjoy the movie!", "Tell me if it's any good."),
        ("That movie was amazing, the ending got me.", "Movie's over. It was okay, a bit long."),
        ("Gotta turn off my phone, the lights are dimming.", "Getting popcorn before it starts."),
    ),
    Event(
        "dentist",
        "They had an appointment at the dentist.",
        (45, 60),
        ("At the dentist, they're calling my name.", "Dentist appointment now, I hate this."),
        ("You'll be fine, it's just a checkup.", "Be brave!"),
        ("No cavities! My mouth is still numb though.", "Done at the dentist, that wasn't so bad."),
        ("Okay they're calling me in, talk later.", "Wish me luck, here goes."),
    ),
    Event(
        "groceries",
        "They went grocery shopping.",
        (30, 40, 45),
        ("Going grocery shopping, need anything?", "Off to the supermarket."),
        ("Could you grab some milk?", "Don't forget the eggs."),
        ("Back home with way too many bags.", "Got everything, including your milk."),
        ("Let me get a cart first.", "Parking now, I'll text you from the store."),
    ),
    Event(
        "flight",
        "They took a flight to visit a friend in another city.",
        (180, 240),
        ("Boarding my flight now.", "The plane is about to take off."),
        ("Have a safe flight!", "Text me when you land."),
        ("Just landed! The flight was smooth.", "I've arrived, waiting for my bags now."),
        ("They're asking us to switch to airplane mode.", "Finding my seat now, bye!"),
    ),
    Event(
        "meeting",
        "They had a long team meeting at work.",
        (60, 90),
        ("My boss just called a team meeting, gotta go.", "Heading into the weekly meeting."),
        ("Good luck, hope it's short.", "Try not to fall asleep."),
        ("Meeting's finally over. It could have been an email.", "Done with the meeting, my brain is fried."),
        ("Walking into the meeting room now.", "Muting my phone, talk after."),
    ),
    Event(
        "nap",
        "They took a short nap in the afternoon.",
        (20, 30),
        ("I'm going to take a quick nap.", "So sleepy, napping for a bit."),
        ("Sweet dreams!", "Good idea, recharge."),
        ("Woke up from my nap, feel so much better.", "That nap was exactly what I needed."),
        ("Setting my alarm now.", "Lying down now, talk soon."),
    ),
    Event(
        "yoga",
        "They went to a yoga class.",
        (60, 75),
        ("Yoga class starts now, time to stretch.", "At the yoga studio, rolling out my mat."),
        ("Namaste!", "Enjoy, I need to try that sometime."),
        ("Class is over, I feel so relaxed.", "Finished yoga, my back feels great."),
        ("The teacher is starting, bye!", "Putting my phone away now."),
    ),
    Event(
        "baking",
        "They baked a birthday cake.",
        (90, 120),
        ("I'm about to bake a birthday cake for my sister.", "Baking a cake, first time ever."),
        ("Ooh, what flavor?", "Good luck, follow the recipe!"),
        ("The cake is out of the oven and it looks perfect!", "Done baking, the kitchen smells amazing."),
        ("Preheating the oven now.", "Let me find the flour first."),
    ),
    Event(
        "run",
        "They went for a run in the park.",
        (30, 40, 50),
        ("Going for a run in the park.", "Lacing up for my evening run."),
        ("Have a good run!", "Don't overdo it."),
        ("Back from my run, I'm dripping with sweat.", "Finished my run, beat my record!"),
        ("Just warming up now.", "Heading out the door, talk later."),
    ),
    Event(
        "interview",
        "They had a job interview.",
        (45, 60),
        ("My job interview is starting now.", "About to walk into the interview."),
        ("You've got this!", "Be yourself, you'll be great."),
        ("The interview went really well, I think they liked me!", "Interview done, fingers crossed."),
        ("Thanks, my hands are shaking.", "They're calling me in, bye!"),
    ),
    Event(
        "piano",
        "They had a piano lesson.",
        (30, 45),
        ("Piano lesson time, I didn't practice enough.", "Off to my piano lesson."),
        ("Play well!", "Your teacher won't notice, haha."),
        ("Lesson's over, she said I improved!", "Done with piano, my fingers hurt."),
        ("Walking in now, bye.", "Let me warm up my hands."),
    ),
    Event(
        "roadtrip",
        "They drove to the beach with friends.",
        (180, 240),
        ("We're driving to the beach now.", "Road trip time, I'm driving."),
        ("Drive safe!", "Have fun at the beach!"),
        ("We made it to the beach, the water is beautiful!", "Finally arrived, traffic was terrible."),
        ("Can't text while driving, see you later.", "Starting the car now, bye!"),
    ),
    Event(
        "concert",
        "They went to a rock concert.",
        (150, 180),
        ("The concert is starting, it's so loud here!", "At the concert, the band is coming on."),
        ("Have fun, take videos!", "Enjoy the show!"),
        ("The concert was incredible, my ears are ringing.", "Show's over, they played all the classics."),
        ("They're starting, I can't hear anything!", "Lights are going down, bye!"),
    ),
    Event(
        "hike",
        "They hiked up a mountain trail.",
        (240, 300, 360),
        ("Starting the mountain hike now.", "At the trailhead, here we go."),
        ("Bring enough water!", "Be careful up there."),
        ("Made it back down, my legs are dead but the view was worth it.", "Hike done, what a view!"),
        ("Signal might drop soon, bye.", "Putting on sunscreen and leaving."),
    ),
    Event(
        "library",
        "They studied at the library for an essay.",
        (120, 180),
        ("Going to the library to finish my essay.", "Library time, this essay is due tomorrow."),
        ("You can do it!", "Focus, no phone!"),
        ("Essay finished! I'm finally free.", "Done studying, I got so much written."),
        ("Let me find a quiet spot first.", "Putting my phone on silent now."),
    ),
    Event(
        "carwash",
        "They took the car through the car wash.",
        (10, 15),
        ("Taking the car through the car wash.", "My car is so dirty, going to the car wash."),
        ("About time, haha.", "Make it shine!"),
        ("The car looks brand new now.", "Car wash done, it's sparkling."),
        ("Pulling in now, bye.", "Waiting in line for the wash."),
    ),
    Event(
        "walkdog",
        "They walked the dog around the neighborhood.",
        (20, 30),
        ("Taking the dog out for a walk.", "The dog is begging for a walk, gotta go."),
        ("Give him a pat for me!", "Enjoy the fresh air."),
        ("We're back, he's so tired now.", "Walk done, he chased every squirrel."),
        ("Putting the leash on now.", "He's pulling me out the door, brb."),
    ),
    Event(
        "overnight_shift",
        "They worked an overnight shift at the hospital.",
        (600, 720),
        ("Heading to my night shift at the hospital.", "Long night shift ahead."),
        ("Stay strong tonight!", "Hope it's a quiet night."),
        ("Shift's finally over. I'm going to sleep all day.", "Survived the night shift, time for bed."),
        ("Clocking in now, talk later.", "Gotta change into scrubs, bye."),
    ),
    Event(
        "daytrip",
        "They spent the whole day at an amusement park.",
        (480, 600),
        ("We're at the amusement park, going in now!", "Amusement park all day today!"),
        ("Ride everything!", "Have so much fun!"),
        ("What a day! I rode every roller coaster.", "Just got home from the park, I'm exhausted."),
        ("The line is moving, bye!", "Going through the gate now."),
    ),
)

GREETINGS = ("Hey, what are you up to?", "Hi! How's your day going?", "Yo, you busy?", "Hey there, what's new?")
OPENERS = ("Not much, just about to do something.", "Pretty busy actually.", "Oh hey!", "Hi!")
FILLER = (
    ("Also I still need to reply to a bunch of emails.", "Busy day then!"),
    ("Did you see the news today?", "Not yet, anything interesting?"),
    ("It's so cold today.", "Yeah, winter is really here."),
    ("I haven't eaten anything since lunch.", "You should grab a snack."),
    ("My phone battery is almost dead.", "Charge it before you go!"),
    ("Are we still on for the weekend?", "Of course, I can't wait."),
)
CLOSERS = ("Okay, I really have to go now.", "Alright, talk to you later.", "Gotta go, bye for now!")
SEND_OFFS = ("Okay, talk later!", "See you!", "Bye, have fun!", "Later!")


def generate_timelychat(n: int, seed: int = 0, split: str = "train") -> list[dict]:
    """`n` dialogs in the TimelyChat evaluation layout; deterministic in (n, seed, split)."""
    rng = random.Random(f"timealign-dialogs:{seed}:{split}")
    records = []
    for index in range(n):
        event = EVENTS[rng.randrange(len(EVENTS))]
        actor, partner = ("A", "B") if rng.random() < 0.5 else ("B", "A")
        turns: list[tuple[str, str]] = []
        if rng.random() < 0.6:
            turns.append((partner, rng.choice(GREETINGS)))
        turns.append((actor, rng.choice(event.announce)))
        turns.append((partner, rng.choice(event.react)))
        for pair in rng.sample(FILLER, rng.randrange(3)):
            turns += [(actor, pair[0]), (partner, pair[1])]
        turns.append((actor, rng.choice(CLOSERS)))
        turns.append((partner, rng.choice(SEND_OFFS)))
        minutes = rng.choice(event.minutes)
        records.append(
            {
                "id": f"synthetic-{split}-{seed}-{index}",
                "narrative": event.narrative,
                "duration": render_minutes(minutes),
                "event": event.key,
                "speaker_list": [s for s, _ in turns],
                "context": [u for _, u in turns],
                "target_speaker": actor,
                "time_elapsed": render_minutes(minutes),
                "timely_response": rng.choice(event.timely),
                "untimely_response": rng.choice(event.instant),
            }
        )
    return records
