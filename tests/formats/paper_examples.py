"""Trajectories printed in the papers, transcribed from the papers' figures and examples.

Extraction artefacts are undone where noted (Markdown backticks around tags, HTML ``<p>`` wrappers); the text
between tags is the papers'.
"""

# HiPRAG Appendix A, Figure 3 (a): the original Search-R1 format.
HIPRAG_FIG3A = """<think>
Okay, this is a multi-part question. I need to figure out the latest PlayStation, who makes its graphics card, \
who the CEO of that company is, and their recent stock price. I’ll start by finding the most recent PlayStation \
console.
</think>
<search> latest playstation console model </search>
<information>
The latest PlayStation console is the PlayStation 5 (PS5), which was released by Sony in November 2020. It \
features a custom AMD RDNA 2-based GPU.
</information>
<think>
So, the latest console is the PlayStation 5,
and the graphics card is made by AMD. Now that I’ve identified the company as AMD, I need to find its current CEO.
</think>
<search>
current CEO of AMD </search>
<information>
Dr. Lisa Su is the chair and chief executive officer of Advanced Micro Devices (AMD). She has held the CEO \
position since 2014.
</information>
<think>
Great, the CEO of AMD is Dr. Lisa Su.
The final piece of information I need is the closing stock price from the last trading day. Since today is \
Saturday, July 19, 2025, I need the price from Friday, July 18, 2025.
</think>
<search>
AMD stock price closing July 18 2025 </search>
<information>
On Friday, July 18, 2025, the stock for Advanced Micro Devices, Inc. (ticker: AMD) closed at a price of $175.40 \
per share.
</information>
<think>
I have all the necessary information. The company is AMD, the CEO is Dr. Lisa Su, and the closing stock price \
was $175.40. I can now provide the final answer.
</think>
<answer> Dr. Lisa Su and $175.40. </answer>"""

# HiPRAG Appendix A, Figure 3 (b): the same reasoning in HiPRAG's parsable format.
HIPRAG_FIG3B = """<think>
<step>
<reasoning> This is a multi-part question. First, I need to identify the latest PlayStation console. Then, I \
need to find out which company makes its graphics cards. I suspect it’s either Sony itself, NVIDIA, or AMD, but I \
need to be certain. I will start by identifying the latest PlayStation model. </reasoning>
<search> latest playstation console model </search>
<context> The latest PlayStation console is the PlayStation 5 (PS5). </context>
<conclusion> PlayStation 5 (PS5) </conclusion>
</step>
<step>
<reasoning> Now that I know the console is the PS5, I need to find the manufacturer of its graphics processing \
unit (GPU). </reasoning>
<conclusion> AMD </conclusion>
</step>
<step>
<reasoning> I have identified the company as AMD. Now I need to find its current CEO. </reasoning>
<search> current CEO of AMD </search>
<context> The current President and CEO of AMD is Dr. Lisa Su. </context>
<conclusion> Dr. Lisa Su </conclusion>
</step>
<step>
<reasoning> I have the company (AMD) and the CEO (Lisa Su). Now I need to find the stock price. Today is \
Saturday, July 19, 2025, so I need the closing price from Friday, July 18, 2025. </reasoning>
<search> AMD stock price closing July 18 2025 </search>
<context> AMD (Advanced Micro Devices, Inc.) closed at $175.40 on Friday, July 18, 2025. </context>
<conclusion> $175.40 </conclusion>
</step>
</think>
<answer>
Dr. Lisa Su and $175.40.
</answer>"""

# HiPRAG Appendix G, Figure 8: HiPRAG-trained model, one non-search step then one search step.
HIPRAG_FIG8 = """<think>
<step>
<reasoning>What do I need to know to answer this question? First, I need to find this performer of Slow Down. \
Then I need to find out the place of birth of the performer.</reasoning>
<conclusion>According to the question, the performer of the song Slow Down (Lacy J. Dalton Song) is Lacy J. \
Dalton...</conclusion>
</step>
<step>
<reasoning>Now that I have the answer to the first part, I need to find the place of birth of the performer. \
Where can I find this information? I will need to search for it.</reasoning>
<search>Place of birth of Lacy J. Dalton</search>
<context>Doc 1(Title: "Lacy J. Dalton") Lacy J. Dalton (born Jill Lynne Byrem; October 13, 1946, Bloomsburg, \
Pennsylvania) is an American country singer...</context>
<conclusion>According to the context, the place of birth of Lacy J. Dalton is Bloomsburg, Pennsylvania.\
</conclusion>
</step>
</think>
<answer>According to the information found, the place of birth of the performer of the song Slow Down (Lacy J. \
Dalton Song) is Bloomsburg, Pennsylvania. Lacy J. Dalton was born on October 13, 1946, in Bloomsburg, \
Pennsylvania.</answer>"""

# ReasonRAG Appendix C, Figure 10 "Agent Thoughts" (the extraction's Markdown backticks around tags removed).
REASONRAG_FIG10 = (
    "So the next query is <query>What is the release year of Il Coraggio and who directed it?</query> "
    "Based on the query, the relevant evidence is <evidence>Il Coraggio is a 1955 Italian comedy film directed "
    "by Domenico Paolella. </evidence> "
    "So the next query is <query>Who directed Shark Monroe and when was the director’s death?</query> "
    "Based on the query, the relevant evidence is <evidence>William S. Hart directed Shark Monroe, which was "
    "released in 1918. William S. Hart died on December 3, 1945.</evidence> "
    "So the next query is <query>When did Domenico Paolella die?</query> "
    "Based on the query, the relevant evidence is <evidence>Domenico Paolella died on 7 October 2002. </evidence> "
    "So the answer is <answer>Il Coraggio</answer>"
)

# Search-P1 Appendix E, Figure 10, the Search-P1 trajectory as printed: it ends with "Final: Eddie Argos".
SEARCHP1_FIG10 = (
    "<reasoning> I need to: 1. Find the band performing “Bang Bang Rock & Roll”. 2. Find the lead singer. "
    "</reasoning> <tool_call> “Bang Bang Rock & Roll” album </tool_call> <tool_response> “Bang Bang Rock & Roll” "
    "is the debut album by British rock band Art Brut</tool_response> <tool_call> lead singer of Art Brut "
    "</tool_call> <tool_response> …frontman Eddie Argos’ enthusiastic vocal delivery… </tool_response> "
    "Final: Eddie Argos"
)
SEARCHP1_FIG10_TAGGED = SEARCHP1_FIG10.replace("Final: Eddie Argos", "<answer>Eddie Argos</answer>")

# Search-P1 Figure 10, the Search-R1 side: its observations are written <result> and it ends with "Final:".
SEARCHP1_FIG10_SEARCHR1 = (
    "<think> I need to find who performs “Bang Bang Rock & Roll.” </think> <search> song Bang Bang rock and roll "
    "genre </search> <result> In 2017, Dan Auerbach collaborated with Robert Finley on “Bang Bang,” featuring a "
    "classic rock and roll sound… </result> <search> lead singer of The Black Keys </search> <result> Dan Auerbach "
    "serves as the lead vocalist… </result> Final: Dan Auerbach"
)

_SUITS_DOCS = """<information>
Doc 1(Title: "History of suits") History of suits The man's suit of clothes, ...
Doc 2(Title: "Suit (clothing)") Suit (clothing) In clothing, a suit is a set of garments made from the same cloth, ...
Doc 3(Title: Genre) Genre Genre () is any form or type of communication in any mode ...
</information>"""

# AutoSearch Appendix, Figure 13, Search-R1 side. The extraction prints every closing tag as an opening tag
# (e.g. "<search> what genre is suits <search>"); written here with proper closing tags.
AUTOSEARCH_FIG13_SEARCHR1 = f"""<think> To answer the question about the genre of Suits, I need to gather \
information about the TV show. </think>
<search> what genre is suits </search>
{_SUITS_DOCS}
<think> From the search results, I found that a suit is a type of formal clothing. </think>
<search> what genre is suits </search>
{_SUITS_DOCS}
<think> Based on the search results, I understand that Suits is a television show that falls under the genre of \
Drama and Sitcom. </think>
<answer> Drama and Sitcom </answer>"""

# AutoSearch Figure 13, AutoSearch side (same tag repair).
AUTOSEARCH_FIG13_AUTOSEARCH = f"""<think> I need to determine which genre Suits belongs to. I don't have any \
pre-existing knowledge about this. </think>
<search> what genre is suits </search>
{_SUITS_DOCS}
<think> From the search results, I found out that Suits is a television series. I now need to determine which \
genre this television series falls into. </think>
<search> what is the genre of suits </search>
<information>
Doc 1(Title: "Suit (clothing)") Suit (clothing) In clothing, ...
Doc 2(Title: "Legal drama") Legal drama A legal drama, or a courtroom drama, ...
Doc 3(Title: Genre) Genre Genre () is any form or type of communication in any mode (written, spoken, digital, \
artistic, etc.) ...
</information>
<think> From the search results, I found out that Suits is a legal drama. </think>
<answer> legal drama </answer>"""

# "Learning When to Search", Appendix Table 7 ("Ours"), HTML <p> wrappers removed.
MULTISTAGE_TABLE7 = """<think> Okay, let's see. The question is when Lavinia Norcross Dickinson's father died. \
First, I need to find out who Lavinia Norcross Dickinson was. From what I remember, she was an American author and \
writer. She's known for her letters and diaries. Now, I need to find out who her father was. Lavinia Norcross \
Dickinson was married to Edmond Dickinson. Wait, but that's her husband. Her father's name... I think her father \
was Samuel Norcross. Wait, but I need to confirm that. Wait, Lavinia Norcross Dickinson was born in 1830. Her \
father's death date would be somewhere in her early life. Wait, I recall that Samuel Norcross died in 1834. Because \
Lavinia was born in 1830, so if her father died when she was four years old, that would put the date around 1834. \
But I need to be sure. Let me make a search.
</think>
<search> when did Lavinia Norcross Dickinson's father die
</search>
<information> Doc 1 (Title: ""Emily Norcross Dickinson"") Emily Norcross Dickinson (née Norcross; July 3, 1804 – \
November 14, 1882) was a member of the Dickinson family of Amherst, Massachusetts, and the mother of American poet \
Emily Dickinson... Doc 2 (Title: ""Lavinia Norcross Dickinson"") Lavinia "Vinnie" Norcross Dickinson (February \
28, 1833 – August 31, 1899) was the younger sister of American poet Emily Dickinson. Vinnie was the youngest of the \
Dickinson siblings born to Edward Dickinson and his wife Emily Norcross in Amherst... Doc 3 (Title: ""Fred \
Norcross"") They had two children, Fred Stevenson Norcross III (1926–1990) and Robert Jackman Norcross \
(1929–2009)... Doc 4 (Title: ""Edward Dickinson"") Edward Dickinson (January 1, 1803 – June 16, 1874) was an \
American politician from Massachusetts. He is also known as the father of the poet Emily Dickinson; their family \
home in Amherst, the Emily Dickinson Museum, is a museum dedicated to her... Doc 5 (Title: ""Emily Dickinson"") Two \
hundred years earlier, her patrilineal ancestors had arrived in the New World—in the Puritan Great Migration—where \
they prospered. Emily Dickinson's paternal grandfather, Samuel Dickinson, was one of the founders of Amherst \
College...
</information>
<reflect> The question is about when Lavinia Norcross Dickinson's father died. From Document 4, we learn that \
Edward Dickinson (father of Emily Dickinson) died on June 16, 1874. Since Lavinia Norcross Dickinson was born on \
February 28, 1833 (Document 2), her father Edward Dickinson was alive when she was born. Therefore, his death date \
of June 16, 1874, is the answer.
</reflect>
<answer> June 16, 1874
</answer>"""

# HiPRAG Appendix G, Figure 7: baseline model, five search steps.
HIPRAG_FIG7 = """<think>
<step>
<reasoning>I don’t have direct information about the performer of the song ’Slow Down’ and their place of \
birth.</reasoning>
<search>What is the performer of the song ’Slow Down’?</search>
<context>... [Returns Doc 1: Bobby Valentino, Doc 2: Douwe Bob, Doc 3: Selena Gomez] ...</context>
<conclusion>Based on the search results, ’Slow Down’ is a song by three different performers: Bobby Valentino, \
Douwe Bob, and Selena Gomez. I don’t have information about the place of birth of the performer of this song.\
</conclusion>
</step>
<step>
<reasoning>Since I don’t have information about the performer’s place of birth, I will first need to determine \
who the performer of the song ’Slow Down’ is.</reasoning>
<search>Who is the performer of the song ’Slow Down’?</search>
<context>... [Returns Doc 1: Bobby Valentino, Doc 2: Douwe Bob, Doc 3: Selena Gomez] ...</context>
<conclusion>Based on the search results, the performer of the song ’Slow Down’ can be either Bobby Valentino, \
Douwe Bob, or Selena Gomez.</conclusion>
</step>
<step>
<reasoning>Now that I know the performers, I will need to find out the place of birth of each of them...\
</reasoning>
<search>What is the place of birth of Bobby Valentino?</search>
<context>... [Returns birthplace: Chatham, Kent] ...</context>
<conclusion>Based on the search results, Bobby Valentino was born in Chatham, Kent.</conclusion>
</step>
<step>
<reasoning>Now that I have the place of birth of Bobby Valentino, I will need to find out the place of birth of \
Douwe Bob.</reasoning>
<search>What is the place of birth of Douwe Bob?</search>
<context>[Returns birthplace: Amsterdam, Netherlands]</context>
<conclusion>Based on the search results, Douwe Bob was born in Amsterdam, Netherlands.</conclusion>
</step>
<step>
<reasoning>Finally, I will need to find out the place of birth of Selena Gomez.</reasoning>
<search>What is the place of birth of Selena Gomez?</search>
<context>[Returns birthplace: Grand Prairie, Texas]</context>
<conclusion>Based on the search results, Selena Gomez was born in Grand Prairie, Texas.</conclusion>
</step>
</think>
<answer>Based on the information gathered, the performer of the song ’Slow Down’ can be either Bobby Valentino, \
Douwe Bob, or Selena Gomez. Bobby Valentino was born in Chatham, Kent. Douwe Bob was born in Amsterdam, \
Netherlands. Selena Gomez was born in Grand Prairie, Texas.</answer>"""
